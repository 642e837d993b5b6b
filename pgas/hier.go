package pgas

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/gaspigo/gaspigo/transport"
)

// Host-aware collectives (docs/design.md §6). A collective whose
// members sit on several hosts, some holding more than one member, runs in
// two levels: the members of each host meet at their host's leader (its
// lowest member), the leaders run the collective among themselves, and
// each leader hands the outcome to its host. Inter-host traffic is then one
// message per host and round instead of one per member.
//
// Allreduce keeps one combine order, fixed by rank, whatever the
// placement: the leaders gather the members' vectors (they do not combine
// what arrives) and every leader reduces all of them with reduceInOrder,
// the order of the flat algorithm. So the result is bit-identical for the
// same group size whatever hosts the ranks are on and whichever transport
// carries the frames.

// Rounds of the two-level collectives, apart from those of the flat ones.
const (
	roundUp       = 1 << 40 // a member's block to its host's leader
	roundLeaders  = 1 << 41 // + step: the leaders' exchange
	roundDown     = 1 << 42 // the outcome from a leader to its host
	roundChunk    = 1 << 43 // + chunk: the pipelined broadcast
	roundRackUp   = 1 << 44 // a host leader's blocks to its rack's leader
	roundRackDown = 1 << 45 // from a rack's leader to its host leaders
)

// Sizes that pick the algorithm.
const (
	// hierGatherMax is the most bytes (group size x vector) a two-level
	// allreduce or allgather gathers at each leader; above it the flat
	// algorithms run (the same result bits, see reduceInOrder).
	hierGatherMax = 256 << 10
	// pipelineMin is the smallest broadcast sent as a pipeline of chunks
	// along a chain ordered by host; smaller ones go down binomial trees.
	pipelineMin = 256 << 10
	// pipelineChunk is the size of one chunk of a pipelined broadcast.
	pipelineChunk = 128 << 10
)

// topology is how the members of one collective sit on hosts, from the
// view it runs in: every member computes the same one.
type topology struct {
	hostOf []int   // member index -> host number; hosts are numbered by their lowest member
	hosts  [][]int // host number -> its member indices, ascending; hosts[h][0] leads host h
	// With a rack level (rack.go; nil without): host number -> rack
	// number, and rack number -> its host numbers, ascending; racks are
	// numbered by their lowest host, and racks[r][0]'s leader leads rack r.
	rackOf []int
	racks  [][]int
}

// placeOnHosts places the members (ranks, in view v) on their hosts
// (hosts, Config.Hosts, indexed by process). Without host labels every
// member is on one host. A process beyond the labels (one that joined the
// job after it formed) is on a host of its own: it shares no memory with
// anyone, so nothing with it may go through a host's shared memory. The
// placement depends only on the view and the labels, which every process
// has alike, joiners included. It costs O(members): a collective takes
// it from its group's shape, computed once per view (groupShape).
func placeOnHosts(ranks []int, v *view, hosts []string) topology {
	n := len(ranks)
	t := topology{hostOf: make([]int, n)}
	if hosts == nil {
		t.hosts = [][]int{make([]int, n)}
		for i := range n {
			t.hosts[0][i] = i
		}
		return t
	}
	// A host is named by its label, or, for a process beyond the labels,
	// by the process itself.
	type hostKey struct {
		label string
		alone transport.Proc
	}
	number := make(map[hostKey]int)
	for i, r := range ranks {
		key := hostKey{alone: transport.NoProc}
		if r < len(v.ranks) {
			switch p := v.ranks[r]; {
			case p == transport.NoProc:
			case int64(p) < int64(len(hosts)):
				key.label = hosts[p]
			default:
				key.alone = p
			}
		}
		h, ok := number[key]
		if !ok {
			h = len(t.hosts)
			number[key] = h
			t.hosts = append(t.hosts, nil)
		}
		t.hostOf[i] = h
		t.hosts[h] = append(t.hosts[h], i)
	}
	return t
}

// twoLevel reports whether the levels pay: more than one host, and a
// host with more than one member or a rack level (placeOnRacks keeps one
// only with a rack of more than one host).
func (t topology) twoLevel() bool {
	return len(t.hosts) > 1 && (len(t.hosts) < len(t.hostOf) || t.racks != nil)
}

// leaders returns the leader of each host, in host order (ascending).
func (t topology) leaders() []int {
	l := make([]int, len(t.hosts))
	for h, m := range t.hosts {
		l[h] = m[0]
	}
	return l
}

// reduceInOrder combines vecs (one per group position) in the order of the
// flat AllreduceBytes: positions above the largest power of two p are
// folded into their lower neighbours (2v with 2v+1 for v < n-p), then the
// p values are combined as a balanced binary tree, the lower operand
// always dst. It returns a new slice and leaves vecs unchanged.
func reduceInOrder(vecs [][]byte, combine func(dst, src []byte)) []byte {
	leaves := make([][]byte, leafCount(len(vecs)))
	for v := range leaves {
		leaves[v] = clone8(vecs[0])
	}
	return reduceLeaves(leaves, vecs, combine)
}

// leafCount is the largest power of two at most n: the leaves of
// reduceInOrder's tree.
func leafCount(n int) int {
	p := 1
	for p*2 <= n {
		p *= 2
	}
	return p
}

// reduceLeaves is reduceInOrder in leaves (leafCount(len(vecs)) buffers
// of len(vecs[0]) bytes, 8-byte aligned, overwritten): it returns
// leaves[0].
func reduceLeaves(leaves, vecs [][]byte, combine func(dst, src []byte)) []byte {
	n, p := len(vecs), len(leaves)
	rem := n - p
	for v := range p {
		if v < rem {
			copy(leaves[v], vecs[2*v])
			combine(leaves[v], vecs[2*v+1])
		} else {
			copy(leaves[v], vecs[v+rem])
		}
	}
	for w := 1; w < p; w *= 2 {
		for v := 0; v < p; v += 2 * w {
			combine(leaves[v], leaves[v+w])
		}
	}
	return leaves[0]
}

// clone8 copies b into a buffer allocated 8-byte aligned, so typed views
// of it are aligned.
func clone8(b []byte) []byte {
	words := make([]uint64, (len(b)+7)/8)
	d := asBytes(words)[:len(b)]
	copy(d, b)
	return d
}

// hostGather brings every member's block to every host leader: each member
// sends its block to its leader, then the leaders exchange what they hold
// (dissemination: ceil(log2 hosts) rounds). At a leader it returns the
// blocks by member index; elsewhere nil. Every block must be size bytes.
func (c *coll) hostGather(ctx context.Context, t topology, block []byte) ([][]byte, error) {
	me := c.me
	members := t.hosts[t.hostOf[me]]
	if me != members[0] {
		return nil, c.send(ctx, members[0], roundUp, block)
	}
	size := len(block)
	blocks := make([][]byte, len(c.ranks))
	blocks[me] = block
	for _, m := range members[1:] {
		d, err := c.recv(ctx, m, roundUp)
		if err != nil {
			return nil, err
		}
		if len(d) != size {
			return nil, c.sizeErr(len(d), size)
		}
		blocks[m] = d
	}
	if err := c.leadersGather(ctx, t, blocks, size); err != nil {
		return nil, err
	}
	for i, b := range blocks {
		if b == nil {
			return nil, fmt.Errorf("pgas: %s: the leaders' exchange left out position %d: %w", c.op, i, ErrInvalid)
		}
	}
	return blocks, nil
}

// leadersGather completes blocks at every host leader, each holding its
// host's: the leaders exchange what they hold by dissemination
// (ceil(log2 hosts) rounds), or, with a rack level, through their racks'
// leaders (rackGather).
func (c *coll) leadersGather(ctx context.Context, t topology, blocks [][]byte, size int) error {
	if t.racks != nil {
		return c.rackGather(ctx, t, blocks, size)
	}
	return c.disseminate(ctx, t.leaders(), t.hostOf[c.me], blocks, size)
}

// disseminate completes blocks at every member of list (group positions;
// this member is list[pos]): in round k each sends what it holds to the
// member 2^k after it and adds what the one 2^k before it sent.
func (c *coll) disseminate(ctx context.Context, list []int, pos int, blocks [][]byte, size int) error {
	n := len(list)
	for k, d := 0, 1; d < n; k, d = k+1, d*2 {
		if err := c.send(ctx, list[(pos+d)%n], roundLeaders+uint64(k), encodeBlocks(blocks)); err != nil {
			return err
		}
		msg, err := c.recv(ctx, list[(pos-d+n)%n], roundLeaders+uint64(k))
		if err != nil {
			return err
		}
		if err := c.decodeBlocks(msg, size, blocks); err != nil {
			return err
		}
	}
	return nil
}

// hostDown hands out from each leader to the other members of its host;
// a member that is not a leader receives it (and gets it back).
func (c *coll) hostDown(ctx context.Context, t topology, out []byte) ([]byte, error) {
	members := t.hosts[t.hostOf[c.me]]
	if c.me != members[0] {
		return c.recv(ctx, members[0], roundDown)
	}
	for _, m := range members[1:] {
		if err := c.send(ctx, m, roundDown, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// encodeBlocks packs the known blocks as (position uint32, block) pairs,
// in position order.
func encodeBlocks(blocks [][]byte) []byte {
	var msg []byte
	for i, b := range blocks {
		if b != nil {
			msg = binary.LittleEndian.AppendUint32(msg, uint32(i))
			msg = append(msg, b...)
		}
	}
	return msg
}

// decodeBlocks adds the blocks of msg (from encodeBlocks) to blocks.
func (c *coll) decodeBlocks(msg []byte, size int, blocks [][]byte) error {
	entry := 4 + size
	if len(msg)%entry != 0 {
		return fmt.Errorf("pgas: %s: a leader sent %d bytes, not a whole number of %d-byte blocks: every member must pass the same size: %w", c.op, len(msg), size, ErrInvalid)
	}
	for ; len(msg) > 0; msg = msg[entry:] {
		i := binary.LittleEndian.Uint32(msg)
		if int(i) >= len(blocks) {
			return fmt.Errorf("pgas: %s: a leader sent a block for position %d of %d: %w", c.op, i, len(blocks), ErrInvalid)
		}
		if blocks[i] == nil {
			blocks[i] = clone8(msg[4:entry])
		}
	}
	return nil
}

func (c *coll) sizeErr(got, want int) error {
	return fmt.Errorf("pgas: %s: %d bytes from a peer, %d here: every member must pass the same size: %w", c.op, got, want, ErrInvalid)
}

// tree lists the members of a tree collective: n positions, position k
// being group position at(k); me is this member's position.
type tree struct {
	n, me int
	at    func(k int) int
}

// listTree is the tree over list (group positions, this member among
// them).
func (c *coll) listTree(list []int) tree {
	return tree{n: len(list), me: slices.Index(list, c.me), at: func(k int) int { return list[k] }}
}

// groupTree is the tree over every group position, in order.
func (c *coll) groupTree() tree {
	return tree{n: len(c.ranks), me: c.me, at: func(k int) int { return k }}
}

// binomial broadcasts buf from tree position root down a binomial tree
// over t, in round.
func (c *coll) binomial(ctx context.Context, t tree, root int, buf []byte, round uint64) error {
	n := t.n
	rel := (t.me - root + n) % n
	mask := 1
	for mask < n {
		if rel&mask != 0 {
			d, err := c.recv(ctx, t.at((rel-mask+root)%n), round)
			if err != nil {
				return err
			}
			if len(d) != len(buf) {
				return fmt.Errorf("pgas: bcast: root sent %d bytes, buffer holds %d: %w", len(d), len(buf), ErrInvalid)
			}
			copy(buf, d)
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if rel+mask < n {
			if err := c.send(ctx, t.at((rel+mask+root)%n), round, buf); err != nil {
				return err
			}
		}
	}
	return nil
}

// bcastHosts broadcasts buf from group position root: to one process per
// host (root for its own host: bcastHeads), then down a binomial tree
// inside each host.
func (c *coll) bcastHosts(ctx context.Context, t topology, buf []byte, root int) error {
	rh := t.hostOf[root]
	heads := t.leaders()
	heads[rh] = root
	myHost := t.hostOf[c.me]
	if c.me == heads[myHost] {
		if err := c.bcastHeads(ctx, t, heads, rh, buf); err != nil {
			return err
		}
	}
	local := t.hosts[myHost]
	return c.binomial(ctx, c.listTree(local), slices.Index(local, heads[myHost]), buf, roundDown)
}

// bcastPipeline broadcasts a large buf from group position root along a
// chain ordered by host (root, its host, then the other hosts, rack by
// rack: hostsByRack), in chunks: each member forwards chunk k while chunk
// k+1 is on its way, so the time is about one transfer of buf plus one
// chunk per hop, and the chain crosses each host (and rack) boundary once.
func (c *coll) bcastPipeline(ctx context.Context, t topology, buf []byte, root int) error {
	chain := make([]int, 0, len(c.ranks))
	chain = append(chain, root)
	for _, h := range t.hostsByRack(t.hostOf[root]) {
		for _, m := range t.hosts[h] {
			if m != root {
				chain = append(chain, m)
			}
		}
	}
	pos := 0
	for i, m := range chain {
		if m == c.me {
			pos = i
		}
	}
	for k, off := 0, 0; off < len(buf); k, off = k+1, off+pipelineChunk {
		part := buf[off:min(off+pipelineChunk, len(buf))]
		if pos > 0 {
			d, err := c.recv(ctx, chain[pos-1], roundChunk+uint64(k))
			if err != nil {
				return err
			}
			if len(d) != len(part) {
				return fmt.Errorf("pgas: bcast: chunk %d of %d bytes, want %d: every member must pass the same size: %w", k, len(d), len(part), ErrInvalid)
			}
			copy(part, d)
		}
		if pos+1 < len(chain) {
			if err := c.send(ctx, chain[pos+1], roundChunk+uint64(k), part); err != nil {
				return err
			}
		}
	}
	return nil
}
