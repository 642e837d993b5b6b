package pgas

import (
	"context"
	"slices"

	"github.com/gaspigo/gaspigo/transport"
)

// The rack level of host-aware collectives (docs/design.md §6.3). With
// rack (or switch) labels (Config.Racks), hosts that share a rack meet at
// the rack's leader, the leader of its lowest host, and only the rack
// leaders talk across racks: the host leaders' exchange of a two-level
// collective becomes three steps (up to the rack leader, the rack
// leaders' exchange, down to the rack's host leaders), and a broadcast
// goes down one more tree. Inter-rack traffic is then one message per
// rack and round instead of one per host. Allreduce keeps its one
// combine order: every host leader still ends with every member's
// vector and reduces them with reduceInOrder, so the bits are those of
// the flat algorithm whatever the racks.

// placeOnRacks groups t's hosts into racks by their labels (racks,
// Config.Racks, indexed by process like the host labels): a host is on
// the rack of its leader's process, and a host of a process beyond the
// labels is on a rack of its own. A rack level is kept only where it
// pays: more than one rack, and a rack with more than one host.
func (t *topology) placeOnRacks(ranks []int, v *view, racks []string) {
	if racks == nil || len(t.hosts) < 3 {
		return
	}
	number := make(map[string]int)
	rackOf := make([]int, len(t.hosts))
	var list [][]int
	for h, members := range t.hosts {
		label, own := rackLabel(ranks[members[0]], v, racks)
		n, ok := number[label]
		if own || !ok {
			n = len(list)
			list = append(list, nil)
			if !own {
				number[label] = n
			}
		}
		rackOf[h] = n
		list[n] = append(list[n], h)
	}
	if len(list) > 1 && len(list) < len(t.hosts) {
		t.rackOf, t.racks = rackOf, list
	}
}

// rackLabel is rank r's rack label in view v, or own when its process has
// none (beyond the labels, or no process).
func rackLabel(r int, v *view, racks []string) (label string, own bool) {
	if r >= len(v.ranks) {
		return "", true
	}
	p := v.ranks[r]
	if p == transport.NoProc || int64(p) >= int64(len(racks)) {
		return "", true
	}
	return racks[p], false
}

// rackLeaders returns the group position that leads each rack, in rack
// order.
func (t topology) rackLeaders() []int {
	l := make([]int, len(t.racks))
	for r, hosts := range t.racks {
		l[r] = t.hosts[hosts[0]][0]
	}
	return l
}

// hostsByRack lists the host numbers starting with host first, then the
// other hosts of its rack, then the other racks' hosts, rack by rack
// (each in ascending order); without racks, first and then the others in
// order. A chain or ring along it crosses each rack boundary once.
func (t topology) hostsByRack(first int) []int {
	out := make([]int, 0, len(t.hosts))
	out = append(out, first)
	if t.racks == nil {
		for h := range t.hosts {
			if h != first {
				out = append(out, h)
			}
		}
		return out
	}
	fr := t.rackOf[first]
	order := []int{fr}
	for r := range t.racks {
		if r != fr {
			order = append(order, r)
		}
	}
	for _, r := range order {
		for _, h := range t.racks[r] {
			if h != first {
				out = append(out, h)
			}
		}
	}
	return out
}

// rackGather completes blocks at every host leader (each holding its
// host's) through the racks: the host leaders of a rack send theirs to
// the rack's leader, the rack leaders exchange what they hold by
// dissemination, and each rack leader hands everything back to its
// rack's host leaders.
func (c *coll) rackGather(ctx context.Context, t topology, blocks [][]byte, size int) error {
	rack := t.rackOf[t.hostOf[c.me]]
	head := t.hosts[t.racks[rack][0]][0]
	if c.me != head {
		if err := c.send(ctx, head, roundRackUp, encodeBlocks(blocks)); err != nil {
			return err
		}
		msg, err := c.recv(ctx, head, roundRackDown)
		if err != nil {
			return err
		}
		return c.decodeBlocks(msg, size, blocks)
	}
	others := t.racks[rack][1:]
	for _, h := range others {
		msg, err := c.recv(ctx, t.hosts[h][0], roundRackUp)
		if err != nil {
			return err
		}
		if err := c.decodeBlocks(msg, size, blocks); err != nil {
			return err
		}
	}
	if err := c.disseminate(ctx, t.rackLeaders(), rack, blocks, size); err != nil {
		return err
	}
	all := encodeBlocks(blocks)
	for _, h := range others {
		if err := c.send(ctx, t.hosts[h][0], roundRackDown, all); err != nil {
			return err
		}
	}
	return nil
}

// bcastHeads broadcasts buf from heads[rh] to every host's head (heads:
// one group position per host, this member among them): down a binomial
// tree over the heads, or, with racks, down one over a head per rack (the
// root's host's for its rack) and then one over each rack's heads.
func (c *coll) bcastHeads(ctx context.Context, t topology, heads []int, rh int, buf []byte) error {
	if t.racks == nil {
		return c.binomial(ctx, c.listTree(heads), rh, buf, roundLeaders)
	}
	rootRack := t.rackOf[rh]
	rackHead := make([]int, len(t.racks)) // host number heading each rack
	for r, hosts := range t.racks {
		rackHead[r] = hosts[0]
	}
	rackHead[rootRack] = rh
	myHost := t.hostOf[c.me]
	myRack := t.rackOf[myHost]
	if myHost == rackHead[myRack] {
		top := make([]int, len(rackHead))
		for r, h := range rackHead {
			top[r] = heads[h]
		}
		if err := c.binomial(ctx, c.listTree(top), rootRack, buf, roundLeaders); err != nil {
			return err
		}
	}
	hosts := t.racks[myRack]
	local := make([]int, len(hosts))
	for i, h := range hosts {
		local[i] = heads[h]
	}
	return c.binomial(ctx, c.listTree(local), slices.Index(hosts, rackHead[myRack]), buf, roundRackDown)
}
