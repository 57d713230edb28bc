package spec

import (
	"reflect"
	"strings"
	"testing"
)

func valid() Task {
	return Task{Command: []string{"true"}}.Normalize()
}

// Normalize fills every default once, gives each enumeration its one
// stored form, and changes nothing the second time.
func TestNormalize(t *testing.T) {
	n := Task{Command: []string{"true"}, Driver: DriverExec, Network: NetworkHost, OnDisconnect: OnDisconnectStop}.Normalize()
	if *n.Priority != DefaultPriority || *n.TimeoutSeconds != DefaultTimeoutSeconds || *n.MaxAttempts != DefaultMaxAttempts ||
		n.Capability != DefaultCapability || n.CapabilityVersion != DefaultCapabilityVersion || n.Submitter != DefaultSubmitter {
		t.Fatalf("defaults not applied: %+v", n)
	}
	if n.Driver != "" || n.Network != "" || n.OnDisconnect != "" {
		t.Fatalf("the defaults of the enumerations must be stored empty: %+v", n)
	}
	if again := n.Normalize(); !reflect.DeepEqual(again, n) {
		t.Fatalf("normalizing twice changed the task: %+v then %+v", n, again)
	}
	zero := 0
	if got := (Task{Command: []string{"true"}, Priority: &zero}).Normalize(); *got.Priority != 0 {
		t.Fatalf("an explicit 0 priority became %d", *got.Priority)
	}
	if got := (Task{Command: []string{"true"}, Image: "busybox"}).Normalize(); got.Driver != DriverOCI {
		t.Fatalf("a task with an image and no driver is an oci task, got %q", got.Driver)
	}
}

// Every rule names the field at fault, by its path in the JSON form, and
// every problem of a task is reported at once.
func TestTaskValidateNamesTheField(t *testing.T) {
	for name, c := range map[string]struct {
		edit func(*Task)
		want string
	}{
		"empty command":     {func(t *Task) { t.Command = nil }, "command: must not be empty"},
		"priority":          {func(t *Task) { *t.Priority = 101 }, "priority: 101 is outside 0..100"},
		"timeout":           {func(t *Task) { *t.TimeoutSeconds = 0 }, "timeout_seconds: 0 is outside 1..604800"},
		"attempts":          {func(t *Task) { *t.MaxAttempts = 0 }, "max_attempts: 0 is outside 1..100"},
		"negative cpu":      {func(t *Task) { t.Resources.CPUMillis = -1 }, "resources.cpu_millis: -1 must not be negative"},
		"negative disk":     {func(t *Task) { t.Resources.DiskMB = -5 }, "resources.disk_mb: -5 must not be negative"},
		"env name":          {func(t *Task) { t.Env = map[string]string{"A=B": "x"} }, `env: name "A=B" is invalid`},
		"size":              {func(t *Task) { t.Size = "huge" }, `size: "huge" must be one of small, medium, large`},
		"tier":              {func(t *Task) { t.Tiers = []string{"L1", "L9"} }, `tiers[1]: "L9" is not L1, L2, L3`},
		"input":             {func(t *Task) { t.Inputs = []string{"ok", "a/b"} }, `inputs[1]: dataset name "a/b"`},
		"output":            {func(t *Task) { t.Outputs = []string{".."} }, `outputs[0]: dataset name ".."`},
		"on_disconnect":     {func(t *Task) { t.OnDisconnect = "pause" }, `on_disconnect: "pause" must be stop or keep_running`},
		"driver":            {func(t *Task) { t.Driver = "vm" }, `driver: "vm" must be exec or oci`},
		"image without oci": {func(t *Task) { t.Image = "busybox" }, "image: is for the oci driver"},
		"oci without image": {func(t *Task) { t.Driver = DriverOCI }, "image: the oci driver needs one"},
		"network":           {func(t *Task) { t.Driver, t.Image, t.Network = DriverOCI, "busybox", "bridge" }, `network: "bridge" must be host or none`},
		"long name":         {func(t *Task) { t.Name = strings.Repeat("n", MaxNameLen+1) }, "name: is longer than 256 bytes"},
		"no capability":     {func(t *Task) { t.Capability = "" }, "capability: must not be empty"},
		"not normalized":    {func(t *Task) { t.Priority = nil }, "priority: missing (the spec is not normalized)"},
	} {
		t.Run(name, func(t *testing.T) {
			task := valid()
			c.edit(&task)
			err := task.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	task := valid()
	if err := task.Validate(); err != nil {
		t.Fatalf("a normalized task with a command: %v", err)
	}
	task.Command, task.Resources.GPU = nil, -1
	err := task.Validate()
	if err == nil || !strings.Contains(err.Error(), "command: ") || !strings.Contains(err.Error(), "resources.gpu: ") {
		t.Fatalf("both problems must be reported: %v", err)
	}
}

// A job's problems name the stage by its name and the field under it.
func TestJobValidateNamesTheStageAndField(t *testing.T) {
	stage := func(name string, deps ...string) Stage {
		return Stage{Name: name, DependsOn: deps, Task: Task{Command: []string{"true"}}}
	}
	bad := stage("b", "a")
	bad.Task.Command = nil
	job := Job{Name: "p", OnFailure: OnFailureFail, Stages: []Stage{stage("a"), bad}, Schedule: &Schedule{Cron: "@every 1m", Overlap: "sometimes"}}.Normalize()
	if job.OnFailure != "" {
		t.Fatalf("on_failure fail is the default, stored empty: %q", job.OnFailure)
	}
	if job.Stages[0].Task.Name != "a" || job.Stages[0].Task.Priority == nil {
		t.Fatalf("a stage's task is normalized and named after its stage: %+v", job.Stages[0].Task)
	}
	err := job.Validate()
	for _, want := range []string{"stages[b].task.command: must not be empty", `schedule.overlap: "sometimes" must be forbid, allow or replace`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
}

func TestParseCapabilityAndTimeout(t *testing.T) {
	if n, v, err := ParseCapability("gpu@2"); err != nil || n != "gpu" || v != "2" {
		t.Fatalf("gpu@2: %q %q %v", n, v, err)
	}
	for _, bad := range []string{"gpu", "@2", "gpu@"} {
		if _, _, err := ParseCapability(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if s, err := ParseTimeout("2m"); err != nil || s != 120 {
		t.Fatalf("2m: %d %v", s, err)
	}
	for _, bad := range []string{"500ms", "1.5s", "soon", "-1s"} {
		if _, err := ParseTimeout(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// A node's declaration is checked field by field, as a task's is.
func TestNodeValidateNamesTheField(t *testing.T) {
	good := Node{ID: "edge-1", Capabilities: map[string][]string{"exec": {"1"}}, Resources: Resources{CPUMillis: 1000}, Slots: 2}
	if err := good.Validate(); err != nil {
		t.Fatalf("a good node: %v", err)
	}
	bad := Node{ID: "bad id", Capabilities: map[string][]string{"gpu": {""}}, Resources: Resources{MemoryMB: -1}, Slots: MaxNodeSlots + 1, Weight: -1}
	err := bad.Validate()
	for _, want := range []string{`id: "bad id" must be`, "resources.memory_mb: -1 must not be negative", "slots: 1025 is outside 0..1024",
		"weight: -1 is outside", `capabilities: "gpu" needs a name and at least one non-empty version`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want %q", err, want)
		}
	}
}
