//go:build !unix

// Package cputime reads the CPU time (user and system) a process has used,
// and that of its children it has waited for: what the benchmarks divide
// by the work done to say what each task cost.
package cputime

import "time"

// CPU times are read with getrusage, which only Unix systems have;
// elsewhere they read zero, and the figures per task with them.

// Self is the CPU time this process has used so far: zero here.
func Self() time.Duration { return 0 }

// Children is the CPU time of this process's reaped children: zero here.
func Children() time.Duration { return 0 }
