package scheduler

import (
	"container/heap"
	"strconv"
)

// Placer answers Select for many requests against one set of nodes that
// the caller books as it goes (Book adds a reservation and a running
// attempt), as the leader does within one placement pass. Requests with
// the same requirements form a class; the first request of a class ranks
// every node once, and later ones take the best from a heap, re-checking
// only the nodes they look at. That is correct because booking only ever
// lowers a node's score and eligibility: a stale heap entry overstates,
// so the first entry whose fresh score matches its key is the best node.
//
// The answer is always exactly Select(nodes, req, cfg). Requests carrying
// per-task state (blacklist, failures, passed-over nodes) go straight to
// Select; a weighted random choice takes the best K from the heap the
// same way.
type Placer struct {
	nodes   []*Node
	cfg     *Config
	classes map[string]*placerClass
	// summaries holds Summarize's answers by class, until the next Book.
	summaries map[string]string
	// probation is set when a node is on probation for some class: its
	// eligibility then depends on a request's class.
	probation bool
}

// NewPlacer prepares a placer over nodes; cfg may be nil.
func NewPlacer(nodes []*Node, cfg *Config) *Placer {
	p := &Placer{nodes: nodes, cfg: cfg, classes: map[string]*placerClass{}, summaries: map[string]string{}}
	for _, n := range nodes {
		if len(n.Probation) > 0 {
			p.probation = true
			break
		}
	}
	return p
}

// Book records that the caller placed a request needing res on n, one of
// the placer's nodes: a running attempt more and res reserved.
func (p *Placer) Book(n *Node, res Resources) {
	n.Reserved = n.Reserved.Add(res)
	n.RunningAttempts++
	clear(p.summaries)
}

// ByClass reports whether a request's class can change which nodes take
// it: only when some node is on probation, which is by class.
func (p *Placer) ByClass() bool { return p.probation }

// Summarize returns what Summarize(nodes, req) returns now, and whether
// it evaluated the nodes to get it. Requests with the same requirements
// for eligibility and no per-task state share one answer until the next
// Book, whatever their class (unless a node is on probation, which is by
// class) or preferences: with every slot taken, a
// leader explaining why a backlog of one kind waits evaluated every node
// again for each task.
func (p *Placer) Summarize(req *Request) (summary string, evaluated bool) {
	if len(req.Blacklist) > 0 || len(req.PassedOver) > 0 {
		return Summarize(p.nodes, req), true
	}
	key := summaryKey(req)
	if p.probation {
		key += "\x07" + req.Class
	}
	if s, ok := p.summaries[key]; ok {
		return s, false
	}
	s := Summarize(p.nodes, req)
	p.summaries[key] = s
	return s, true
}

type placerClass struct {
	req  Request // the class's requirements, no per-task state
	c    compiled
	heap candidateHeap
}

// Select returns what Select(nodes, req, cfg) would return now.
func (p *Placer) Select(req *Request) (Candidate, error) {
	if len(req.Blacklist) > 0 || len(req.FailedOn) > 0 || len(req.PassedOver) > 0 || p.probation {
		return Select(p.nodes, req, p.cfg)
	}
	key := classKey(req)
	cl := p.classes[key]
	if cl == nil {
		cl = &placerClass{req: *req}
		cl.req.TaskID = ""
		cl.c = compile(&cl.req)
		for _, n := range p.nodes {
			if evaluate(n, &cl.req, &cl.c, nil) {
				cl.heap = append(cl.heap, Candidate{Node: n, Score: score(n, &cl.req, &cl.c, p.cfg)})
			}
		}
		heap.Init(&cl.heap)
		p.classes[key] = cl
	}
	if p.cfg != nil && p.cfg.RandomTopK > 1 {
		top := p.best(cl, p.cfg.RandomTopK)
		if len(top) == 0 {
			return Candidate{}, ErrNoEligibleNode
		}
		return weightedPick(spreadGroup(top, p.cfg), req.Seed), nil
	}
	for len(cl.heap) > 0 {
		top := &cl.heap[0]
		if !evaluate(top.Node, &cl.req, &cl.c, nil) {
			heap.Pop(&cl.heap) // booked full: it stays full for this pass
			continue
		}
		if s := score(top.Node, &cl.req, &cl.c, p.cfg); s != top.Score {
			top.Score = s
			heap.Fix(&cl.heap, 0)
			continue
		}
		return *top, nil
	}
	return Candidate{}, ErrNoEligibleNode
}

// best returns the class's k best candidates with fresh scores, in
// Rank's order, leaving them in the heap.
func (p *Placer) best(cl *placerClass, k int) []Candidate {
	var got []Candidate
	for len(got) < k && len(cl.heap) > 0 {
		top := &cl.heap[0]
		if !evaluate(top.Node, &cl.req, &cl.c, nil) {
			heap.Pop(&cl.heap)
			continue
		}
		if s := score(top.Node, &cl.req, &cl.c, p.cfg); s != top.Score {
			top.Score = s
			heap.Fix(&cl.heap, 0)
			continue
		}
		got = append(got, heap.Pop(&cl.heap).(Candidate))
	}
	for _, c := range got {
		heap.Push(&cl.heap, c)
	}
	return got
}

// summaryKey names what a request's eligibility depends on, besides
// per-task state: what evaluate reads, and nothing only scoring reads.
func summaryKey(r *Request) string {
	return string(appendEligibility(make([]byte, 0, 64+len(r.Capability)+len(r.CapabilityVersion)), r))
}

// classKey names a request's requirements (everything evaluate and score
// read, except per-task state): summaryKey's and what scoring reads.
// Both are computed for every task a pass looks at, so they append bytes
// rather than formatting (fmt was four fifths of Select's time).
func classKey(r *Request) string {
	b := appendEligibility(make([]byte, 0, 96+len(r.Capability)+len(r.CapabilityVersion)), r)
	b = append(b, 4)
	b = appendLabels(b, r.PreferredLabels)
	b = append(b, 5)
	for _, in := range r.Inputs {
		b = append(b, in.Name...)
		b = append(b, 0)
		b = strconv.AppendInt(b, in.Bytes, 10)
		b = append(b, 0)
	}
	b = append(b, 6)
	b = append(b, r.Class...)
	b = append(b, 0)
	b = append(b, r.Size...)
	b = append(b, 0)
	b = strconv.AppendInt(b, r.ClassMedianMillis, 10)
	return string(b)
}

// appendLabels appends a label map's pairs in key order, each part ended
// by a zero byte.
func appendLabels(b []byte, m map[string]string) []byte {
	for _, p := range pairs(m) {
		b = append(b, p.key...)
		b = append(b, 0)
		b = append(b, p.value...)
		b = append(b, 0)
	}
	return b
}

// appendEligibility appends the fields eligibility reads, each section
// opened by a byte of its own.
func appendEligibility(b []byte, r *Request) []byte {
	b = append(b, r.Capability...)
	b = append(b, 0)
	b = append(b, r.CapabilityVersion...)
	b = append(b, 0)
	b = append(b, r.Driver...)
	b = append(b, 1)
	b = appendLabels(b, r.RequiredLabels)
	b = append(b, 2)
	for _, t := range r.Tiers {
		b = append(b, byte(t))
	}
	for _, v := range [...]int64{r.Resources.CPUMillis, r.Resources.MemoryMB, r.Resources.GPU, r.Resources.DiskMB, r.Now.UnixNano(), int64(r.HeartbeatTTL)} {
		b = append(b, 3)
		b = strconv.AppendInt(b, v, 10)
	}
	return b
}

// candidateHeap is a max-heap in compareCandidates order (best first).
type candidateHeap []Candidate

func (h candidateHeap) Len() int           { return len(h) }
func (h candidateHeap) Less(i, j int) bool { return compareCandidates(h[i], h[j]) < 0 }
func (h candidateHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *candidateHeap) Push(x any)        { *h = append(*h, x.(Candidate)) }
func (h *candidateHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
