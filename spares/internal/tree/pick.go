package tree

import "time"

// Pick returns the first process of up not in bad, or, when all are, the
// one whose mark ends first (fallback); None when up is empty. bad maps a
// process that failed the asker lately to when the asker may try it
// again. With expire, the marks that ended by now are dropped first.
func Pick(up []uint32, bad map[uint32]time.Time, now time.Time, expire bool) (proc uint32, fallback bool) {
	best := None
	for _, p := range up {
		until, marked := bad[p]
		if marked && expire && now.After(until) {
			delete(bad, p)
			marked = false
		}
		if !marked {
			return p, false
		}
		if best == None || until.Before(bad[best]) {
			best = p
		}
	}
	return best, best != None
}
