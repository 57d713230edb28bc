package fsm

import (
	"fmt"
	"testing"
	"time"

	"herd/scheduler"
)

// BenchmarkReserveApply measures applying reservations, 512 to an entry as
// the leader batches them, into a state holding 1,000 nodes and a deep
// pending backlog: the FSM's share of every placement, paid on each replica.
func BenchmarkReserveApply(b *testing.B) {
	const nodes, backlog, batch = 1000, 100_000, 512
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := New(nil)
	index := uint64(0)
	apply := func(cmds [][]byte) {
		index++
		f.ApplyBytes(index, EncodeBatch(cmds))
	}
	var cmds [][]byte
	for i := 0; i < nodes; i++ {
		b, _ := Encode(MsgRegisterNode, RegisterNodeRequest{Now: now, Node: Node{
			ID: fmt.Sprintf("node-%04d", i), Capabilities: map[string][]string{"exec": {"1"}},
			Resources: scheduler.Resources{CPUMillis: 1 << 40, MemoryMB: 1 << 40}, Slots: 1 << 30,
		}})
		cmds = append(cmds, b)
	}
	apply(cmds)
	for start := 0; start < backlog; start += 1000 {
		cmds = cmds[:0]
		for i := start; i < start+1000; i++ {
			b, _ := Encode(MsgSubmitTask, SubmitTaskRequest{ID: fmt.Sprintf("task-%07d", i), SubmittedAt: now, Spec: TaskSpec{
				Name: "b", Priority: 50, Command: []string{"true"}, Capability: "exec", CapabilityVersion: "1",
				Resources: scheduler.Resources{CPUMillis: 10, MemoryMB: 1}, TimeoutSeconds: 60, MaxAttempts: 1, Submitter: "team",
			}})
			cmds = append(cmds, b)
		}
		apply(cmds)
	}
	sessions := map[string]uint64{}
	st := f.State()
	for i := 0; i < nodes; i++ {
		n, _ := st.Node(fmt.Sprintf("node-%04d", i))
		sessions[n.ID] = n.SessionGeneration
	}
	next := 0
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		if next+batch > backlog {
			b.Skip("backlog exhausted")
		}
		cmds = cmds[:0]
		for i := 0; i < batch; i++ {
			node := fmt.Sprintf("node-%04d", (next+i)%nodes)
			c := EncodeReserve(ReserveRequest{TaskID: fmt.Sprintf("task-%07d", next+i), AttemptID: fmt.Sprintf("att-%07d", next+i), Number: 1,
				NodeID: node, SessionGeneration: sessions[node], Score: 1, Now: now, HeartbeatTTL: time.Hour})
			cmds = append(cmds, c)
		}
		next += batch
		b.StartTimer()
		res := f.ApplyBytes(index+1, EncodeBatch(cmds))
		index++
		if br, ok := res.(BatchResult); !ok || len(br) != batch {
			b.Fatalf("unexpected result %T", res)
		} else if rej, ok := br[0].(*Rejection); ok {
			b.Fatalf("rejected: %v", rej)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/reservation")
}
