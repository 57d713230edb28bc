package cluster

import (
	"testing"

	"herd/scheduler"
)

// The in-flight books hold exactly what passes still have in Raft: tasks
// and per-node bookings add up across passes, go away when their pass
// ends, and a pass with every placement rejected is reported futile.
func TestInflightBookkeeping(t *testing.T) {
	f := newInflight()
	if tasks, nodes := f.snapshot(); tasks != nil || nodes != nil {
		t.Fatalf("empty books: %v %v", tasks, nodes)
	}
	res := scheduler.Resources{CPUMillis: 100, MemoryMB: 10}
	first := []proposal{{"t1", "n1", res}, {"t2", "n1", res}}
	second := []proposal{{"t3", "n2", res}}
	f.add(first)
	f.add(second)
	passes, _, changed := f.state()
	if passes != 2 {
		t.Fatalf("%d passes in flight, want 2", passes)
	}
	tasks, nodes := f.snapshot()
	if len(tasks) != 3 || nodes["n1"].attempts != 2 || nodes["n1"].resources != res.Add(res) || nodes["n2"].attempts != 1 {
		t.Fatalf("books after two passes: %v %+v", tasks, nodes)
	}
	f.done(first, 0)
	select {
	case <-changed:
	default:
		t.Fatal("ending a pass did not signal the loop")
	}
	passes, futile, _ := f.state()
	tasks, nodes = f.snapshot()
	if passes != 1 || !futile || len(tasks) != 1 || nodes["n1"].attempts != 0 || nodes["n2"].attempts != 1 {
		t.Fatalf("after the first pass ended rejected: passes %d futile %v, %v %+v", passes, futile, tasks, nodes)
	}
	f.done(second, 1)
	passes, futile, _ = f.state()
	if tasks, nodes := f.snapshot(); passes != 0 || futile || tasks != nil || nodes != nil {
		t.Fatalf("after both passes: passes %d futile %v, %v %v", passes, futile, tasks, nodes)
	}
}
