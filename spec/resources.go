package spec

// Resources is an amount of allocatable capacity: what a node offers, what a
// task asks for, or what is reserved on a node.
type Resources struct {
	CPUMillis int64 `json:"cpu_millis"`
	MemoryMB  int64 `json:"memory_mb"`
	GPU       int64 `json:"gpu"`
	DiskMB    int64 `json:"disk_mb"`
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{
		CPUMillis: r.CPUMillis + o.CPUMillis,
		MemoryMB:  r.MemoryMB + o.MemoryMB,
		GPU:       r.GPU + o.GPU,
		DiskMB:    r.DiskMB + o.DiskMB,
	}
}

// Sub returns r - o.
func (r Resources) Sub(o Resources) Resources {
	return Resources{
		CPUMillis: r.CPUMillis - o.CPUMillis,
		MemoryMB:  r.MemoryMB - o.MemoryMB,
		GPU:       r.GPU - o.GPU,
		DiskMB:    r.DiskMB - o.DiskMB,
	}
}

// Covers reports whether r is at least o in every dimension.
func (r Resources) Covers(o Resources) bool {
	return r.CPUMillis >= o.CPUMillis && r.MemoryMB >= o.MemoryMB &&
		r.GPU >= o.GPU && r.DiskMB >= o.DiskMB
}

// Negative reports whether any dimension is below zero.
func (r Resources) Negative() bool {
	return r.CPUMillis < 0 || r.MemoryMB < 0 || r.GPU < 0 || r.DiskMB < 0
}
