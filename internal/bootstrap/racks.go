package bootstrap

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ParseRacks parses a PGAS_RACKS value, RACK=HOST,HOST;RACK=HOST (spaces
// around the separators are ignored), into a map from host label to rack
// label. Labels follow the rules of host labels; a host is on one rack.
func ParseRacks(v string) (map[string]string, error) {
	out := map[string]string{}
	for _, entry := range strings.Split(v, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		rack, hosts, ok := strings.Cut(entry, "=")
		rack = strings.TrimSpace(rack)
		if !ok {
			return nil, fmt.Errorf("%q has no '=': write RACK=HOST,HOST", entry)
		}
		if err := checkHost(rack); err != nil {
			return nil, fmt.Errorf("rack %q: %s", rack, strings.Replace(err.Error(), "host label", "rack label", 1))
		}
		for _, h := range strings.Split(hosts, ",") {
			h = strings.TrimSpace(h)
			if err := checkHost(h); err != nil {
				return nil, fmt.Errorf("rack %q: host %q: %v", rack, h, err)
			}
			if was, dup := out[h]; dup && was != rack {
				return nil, fmt.Errorf("host %q is on racks %q and %q: a host is on one rack", h, was, rack)
			}
			out[h] = rack
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("names no rack")
	}
	return out, nil
}

func readRacks(e *Env, v string) error {
	m, err := ParseRacks(v)
	if err != nil {
		return &EnvError{Var: VarRacks, Value: v, Problem: err.Error(),
			Fix: "write RACK=HOST,HOST;RACK=HOST with the host labels of PGAS_HOST, e.g. rack1=node1,node2;rack2=node3,node4, the same in every process (gaspirun --racks sets it)"}
	}
	e.Racks = m
	return nil
}

// FormatRacks writes racks (host label -> rack label) as ParseRacks reads
// it, racks and their hosts in sorted order.
func FormatRacks(racks map[string]string) string {
	byRack := map[string][]string{}
	for h, r := range racks {
		byRack[r] = append(byRack[r], h)
	}
	var b strings.Builder
	for i, r := range slices.Sorted(maps.Keys(byRack)) {
		if i > 0 {
			b.WriteByte(';')
		}
		slices.Sort(byRack[r])
		b.WriteString(r + "=" + strings.Join(byRack[r], ","))
	}
	return b.String()
}
