package spec

import (
	"fmt"
	"strings"
	"time"
)

// ParseCapability reads the "name@version" form a task's capability takes
// in job files and on the command line.
func ParseCapability(s string) (name, version string, err error) {
	name, version, ok := strings.Cut(s, "@")
	if !ok || name == "" || version == "" {
		return "", "", fmt.Errorf("capability %q must be name@version", s)
	}
	return name, version, nil
}

// ParseTimeout reads a task's timeout as job files and the command line
// give it ("90s", "2h"): a whole number of seconds, at least one.
func ParseTimeout(s string) (int64, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("timeout %q must be a whole number of seconds, at least 1s", s)
	}
	return TimeoutSeconds(d)
}

// TimeoutSeconds is a timeout given as a duration in the seconds a task
// declares: a whole number of them, at least one.
func TimeoutSeconds(d time.Duration) (int64, error) {
	if d < time.Second || d%time.Second != 0 {
		return 0, fmt.Errorf("timeout %v must be a whole number of seconds, at least 1s", d)
	}
	return int64(d / time.Second), nil
}
