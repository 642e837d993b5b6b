package job

// racksOf gives each process the rack of its host (PGAS_RACKS, parsed
// into byHost: host label -> rack label), for pgas.Config.Racks; nil
// without racks. A host that PGAS_RACKS does not name is a rack of its
// own, under a label no rack of PGAS_RACKS can have (it starts with a
// NUL byte, which no environment variable holds).
func racksOf(hosts []string, byHost map[string]string) []string {
	if byHost == nil {
		return nil
	}
	out := make([]string, len(hosts))
	for p, h := range hosts {
		if r, ok := byHost[h]; ok {
			out[p] = r
		} else {
			out[p] = "\x00" + h
		}
	}
	return out
}
