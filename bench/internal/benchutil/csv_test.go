package benchutil

import "testing"

func TestParseMeasurement(t *testing.T) {
	for _, c := range []struct {
		line string
		want Measurement
		ok   bool
	}{
		{"write,2,1048576,8,92,3348.8,3729.1,90,0.898,,,,,,false", Measurement{"write", 1 << 20, 3348.8, 3729.1}, true},
		{"write_notify_rtt,2,8,,2934,,,3000,1.02,65.7,105.6,66.0,64.2,98.5,false", Measurement{"write_notify_rtt", 8, 65.7, 64.2}, true},
		{"allreduce,2,8,,8929,,,,,20.9,43.9,21.5,,,false", Measurement{"allreduce", 8, 20.9, 0}, true},
		{"test,ranks,size_bytes,window,iters,pgas_mib_s,raw_mib_s,raw_iters,ratio,median_us,p99_us,mean_us,raw_median_us,raw_p99_us,capped", Measurement{}, false},
		{"# load average at end: 1 1 1", Measurement{}, false},
		{`time=2026-11-25 level=INFO msg="runtime closed"`, Measurement{}, false},
	} {
		got, ok := ParseMeasurement(c.line)
		if ok != c.ok || got != c.want {
			t.Errorf("ParseMeasurement(%q) = %+v, %v; want %+v, %v", c.line, got, ok, c.want, c.ok)
		}
	}
}
