package spec

// Task is a task as a user declares it: what the API takes and shows, what
// the CLI builds from flags and files, and what the FSM stores (in its own
// compact encoding). Optional numbers are pointers so an absent field
// takes its default while an explicit 0 is validated.
type Task struct {
	Name              string            `json:"name,omitempty"`
	IdempotencyKey    string            `json:"idempotency_key,omitempty"`
	Priority          *int              `json:"priority,omitempty"`
	Command           []string          `json:"command"`
	Env               map[string]string `json:"env,omitempty"`
	Capability        string            `json:"capability,omitempty"`
	CapabilityVersion string            `json:"capability_version,omitempty"`
	RequiredLabels    map[string]string `json:"required_labels,omitempty"`
	PreferredLabels   map[string]string `json:"preferred_labels,omitempty"`
	Resources         Resources         `json:"resources"`
	TimeoutSeconds    *int64            `json:"timeout_seconds,omitempty"`
	MaxAttempts       *int              `json:"max_attempts,omitempty"`
	Submitter         string            `json:"submitter,omitempty"`
	// OnDisconnect: "stop" (the default) stops the attempt when its agent
	// loses contact with the cluster past its lease, before it can run
	// elsewhere; "keep_running" lets it run on, for work that is safe to
	// run twice, and re-places it as soon as its node is DOWN.
	OnDisconnect string `json:"on_disconnect,omitempty"`
	// Class groups tasks whose run times compare: the cluster keeps each
	// node's history per class (default: the task's name).
	Class string `json:"class,omitempty"`
	// Size (small, medium, large) limits the tiers the task may run on;
	// Tiers is what it mapped to, set by the cluster.
	Size  string   `json:"size,omitempty"`
	Tiers []string `json:"tiers,omitempty"`
	// Inputs names datasets the task reads: nodes holding them are
	// preferred, by the bytes they hold. Outputs names files the task
	// leaves in its working directory, which become datasets of its node.
	Inputs  []string `json:"inputs,omitempty"`
	Outputs []string `json:"outputs,omitempty"`
	// InputPaths, for a job's stage, is where under $HERD_INPUTS the
	// command finds each input (set by the cluster, in Inputs' order).
	InputPaths []string `json:"input_paths,omitempty"`
	// Driver runs the task: "exec" (the default), a process on the node,
	// or "oci", a container from Image in its own root filesystem and
	// namespaces, on nodes with the capability oci@1. A spec with an
	// image and no driver is an oci task.
	Driver string `json:"driver,omitempty"`
	// Image is an OCI image: a registry reference (host/repo:tag or
	// @sha256:digest), or oci-layout:PATH[:TAG] for an image layout on the
	// node's disk.
	Image string `json:"image,omitempty"`
	// Network of an oci task: "host" (the default) or "none".
	Network string `json:"network,omitempty"`
	// Speculative: once the task's attempt runs past its class's slow
	// threshold, a backup attempt starts on another node and the first
	// to succeed wins (the other is cancelled, its lease dead). For
	// tasks that may run twice at once: idempotent, or writing only their
	// own outputs.
	Speculative bool `json:"speculative,omitempty"`
}

// The drivers and networks of a task, and what a node running oci tasks
// advertises.
const (
	DriverExec           = "exec"
	DriverOCI            = "oci"
	NetworkHost          = "host"
	NetworkNone          = "none"
	OCICapability        = "oci"
	OCICapabilityVersion = "1"
)

// The values of Task.OnDisconnect.
const (
	OnDisconnectStop        = "stop"
	OnDisconnectKeepRunning = "keep_running"
)

// Defaults Normalize gives the fields a task leaves out.
const (
	DefaultPriority          = 50
	DefaultCapability        = "exec"
	DefaultCapabilityVersion = "1"
	DefaultTimeoutSeconds    = 3600
	DefaultMaxAttempts       = 3
	DefaultSubmitter         = "default"
)

// Sizes are the sizes a task may declare, smallest first.
var Sizes = []string{"small", "medium", "large"}

// Tiers are the tier names a task's tiers may hold.
var Tiers = []string{"L1", "L2", "L3"}

// Normalize returns the task with every absent optional field set to its
// default, and the enumerations in their one stored form: the default of
// each (driver exec, network host, on_disconnect stop) is the empty
// string, and a task with an image and no driver is an oci task.
// Normalizing twice gives the same task.
func (t Task) Normalize() Task {
	if t.Priority == nil {
		t.Priority = ptr(DefaultPriority)
	}
	if t.Capability == "" {
		t.Capability = DefaultCapability
	}
	if t.CapabilityVersion == "" {
		t.CapabilityVersion = DefaultCapabilityVersion
	}
	if t.TimeoutSeconds == nil {
		t.TimeoutSeconds = ptr(int64(DefaultTimeoutSeconds))
	}
	if t.MaxAttempts == nil {
		t.MaxAttempts = ptr(DefaultMaxAttempts)
	}
	if t.Submitter == "" {
		t.Submitter = DefaultSubmitter
	}
	switch {
	case t.Driver == "" && t.Image != "":
		t.Driver = DriverOCI
	case t.Driver == DriverExec:
		t.Driver = ""
	}
	if t.Network == NetworkHost {
		t.Network = ""
	}
	if t.OnDisconnect == OnDisconnectStop {
		t.OnDisconnect = ""
	}
	return t
}

func ptr[T any](v T) *T { return &v }
