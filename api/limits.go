package api

// Listing limits: a page holds DefaultListLimit records unless the
// request asks for up to MaxListLimit.
const (
	DefaultListLimit = 100
	MaxListLimit     = 10000
)

// Body limits: ordinary requests are small; snapshot restores are not.
const (
	MaxRequestBytes  = 1 << 20
	MaxSnapshotBytes = 4 << 30
)
