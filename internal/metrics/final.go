package metrics

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gaspigo/gaspigo/internal/durable"
	"github.com/gaspigo/gaspigo/obs"
)

// FinalFile is the file process proc writes its final metrics to in dir
// (PGAS_METRICS_FINAL) when its runtime closes.
func FinalFile(dir string, proc int) string {
	return filepath.Join(dir, fmt.Sprintf("metrics-proc-%d.prom", proc))
}

// WriteFinal writes the process's metrics, as its /metrics would serve
// them now, to FinalFile(dir, proc), whole or not at all. Nothing for an
// empty dir.
func WriteFinal(dir string, proc int) error {
	if dir == "" {
		return nil
	}
	fams, err := Registry(obs.Default).Gather()
	if err != nil {
		return fmt.Errorf("metrics: final snapshot: %w", err)
	}
	var b bytes.Buffer
	err = encodeText(&b, fams)
	if err == nil {
		err = durable.WriteFile(dir, filepath.Base(FinalFile(dir, proc)), b.Bytes(), 0o600)
	}
	if err != nil {
		return fmt.Errorf("metrics: final snapshot: %w", err)
	}
	return nil
}

// encodeText writes fams in Prometheus's text format.
func encodeText(w io.Writer, fams []*dto.MetricFamily) error {
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, fam := range fams {
		if err := enc.Encode(fam); err != nil {
			return err
		}
	}
	return nil
}

// Refresh scrapes every target every d until ctx ends, so that a process
// killed between two scrapes of the endpoint leaves values at most d old
// (the Federation keeps each process's last scrape). A scrape costs each
// process some CPU, so with many targets the pause grows with them
// (perTarget each): 512 processes are scraped every 5 s, not every d.
func (f *Federation) Refresh(ctx context.Context, d time.Duration) {
	const perTarget = 10 * time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			sctx, cancel := context.WithTimeout(ctx, d)
			f.Gather(sctx)
			cancel()
			t.Reset(max(d, time.Duration(len(f.targets()))*perTarget))
		}
	}
}

// Final takes, for each process that wrote its final metrics to dir
// (WriteFinal), those instead of its last scrape, and writes the job's
// metrics in Prometheus's text format to w: the job's final snapshot.
// A process that left no file (it was killed) keeps its last scrape.
func (f *Federation) Final(ctx context.Context, dir string, w io.Writer) error {
	files, _ := filepath.Glob(filepath.Join(dir, "metrics-proc-*.prom"))
	f.mu.Lock()
	for _, path := range files {
		var proc int
		if _, err := fmt.Sscanf(filepath.Base(path), "metrics-proc-%d.prom", &proc); err != nil {
			continue
		}
		fams, err := readFamilies(path, proc)
		if err != nil {
			f.mu.Unlock()
			return err
		}
		f.last[proc] = fams
		f.final[proc] = true
	}
	f.mu.Unlock()
	return encodeText(w, f.Gather(ctx))
}

// readFamilies reads a final snapshot and labels its series with proc.
func readFamilies(path string, proc int) (map[string]*dto.MetricFamily, error) {
	r, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("metrics: final snapshot: %w", err)
	}
	defer r.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("metrics: final snapshot %s: %w", path, err)
	}
	name, pv := "proc", strconv.Itoa(proc)
	for _, fam := range fams {
		for _, m := range fam.Metric {
			m.Label = append(m.Label, &dto.LabelPair{Name: &name, Value: &pv})
		}
	}
	return fams, nil
}
