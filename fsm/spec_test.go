package fsm

import (
	"reflect"
	"testing"

	"herd/spec"
)

// The stored form of a task is made from spec.Task and back without
// losing a field: a task with every field set comes back equal. A field
// added to spec.Task and not to the stored form fails here.
func TestStoredSpecKeepsEveryField(t *testing.T) {
	prio, timeout, attempts := 7, int64(90), 4
	in := spec.Task{
		Name: "n", IdempotencyKey: "k", Priority: &prio, Command: []string{"sh", "-c", "true"}, Env: map[string]string{"A": "1"},
		Capability: "gpu", CapabilityVersion: "2", RequiredLabels: map[string]string{"zone": "a"}, PreferredLabels: map[string]string{"disk": "ssd"},
		Resources: spec.Resources{CPUMillis: 1, MemoryMB: 2, GPU: 3, DiskMB: 4}, TimeoutSeconds: &timeout, MaxAttempts: &attempts,
		Submitter: "team", OnDisconnect: spec.OnDisconnectKeepRunning, Class: "c", Size: "small", Tiers: []string{"L1", "L2"},
		Inputs: []string{"in"}, Outputs: []string{"out"}, InputPaths: []string{"s/in"}, Driver: spec.DriverOCI, Image: "busybox",
		Network: spec.NetworkNone, Speculative: true,
	}
	v := reflect.ValueOf(in)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Fatalf("set %s in this test", v.Type().Field(i).Name)
		}
	}
	if err := in.Validate(); err != nil {
		t.Fatalf("the test's task must be valid: %v", err)
	}
	stored := FromSpec(in)
	if out := stored.Spec(); !reflect.DeepEqual(out, in) {
		t.Fatalf("stored and back:\n got %+v\nwant %+v", out, in)
	}
	if err := stored.Validate(); err != nil {
		t.Fatalf("the stored form validates as the task does: %v", err)
	}
	_, payload, err := decodeHeader(EncodeSubmitTask(SubmitTaskRequest{ID: "t1", Spec: stored}))
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := decodeSubmitTask(payload)
	if err != nil {
		t.Fatal(err)
	}
	if out := decoded.Spec.Spec(); !reflect.DeepEqual(out, in) {
		t.Fatalf("through the binary command:\n got %+v\nwant %+v", out, in)
	}
}

// A stored spec is checked by the task rules of package spec, so the
// FSM refuses what the API refuses.
func TestStoredSpecValidatesByTheTaskRules(t *testing.T) {
	bad := testSpec("")
	shape := *bad.TaskShape
	shape.Resources.MemoryMB = -1
	bad.TaskShape = &shape
	if err := bad.Validate(); err == nil || err.Error() != "resources.memory_mb: -1 must not be negative" {
		t.Fatalf("got %v", err)
	}
	if err := (&TaskSpec{Name: "no shape"}).Validate(); err == nil {
		t.Fatal("a spec without a shape has no command")
	}
}
