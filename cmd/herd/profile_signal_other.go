//go:build !unix

package main

// stopOnProfileSignal does nothing where there is no SIGUSR1: the profile
// runs until the process exits.
func stopOnProfileSignal(func()) {}
