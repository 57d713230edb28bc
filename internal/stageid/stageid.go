// Package stageid names what a job's stages leave behind: the id of a
// stage instance's task, which tells its job, and the dataset a stage's
// output is held under on its node. The replicated state makes these
// names and the agents read them, so both use this package.
package stageid

import (
	"strconv"
	"strings"
)

// TaskID is the id of instance of stage (by position) of job.
func TaskID(job string, stage, instance int) string {
	return job + "." + strconv.Itoa(stage) + "." + strconv.Itoa(instance)
}

// Parse returns the job, stage position and instance of a stage task's
// id; false for any other task (the ids the leader makes for tasks
// submitted on their own never hold a dot).
func Parse(taskID string) (job string, stage, instance int, ok bool) {
	job, rest, found := strings.Cut(taskID, ".")
	if !found {
		return "", 0, 0, false
	}
	s, i, found := strings.Cut(rest, ".")
	if !found {
		return "", 0, 0, false
	}
	stage, err1 := strconv.Atoi(s)
	instance, err2 := strconv.Atoi(i)
	if err1 != nil || err2 != nil || job == "" {
		return "", 0, 0, false
	}
	return job, stage, instance, true
}

// Output is the dataset a stage task's output is held under: "<task>:<output>".
func Output(taskID, output string) string { return taskID + ":" + output }

// IsStageTask reports whether a task id is a stage instance's.
func IsStageTask(taskID string) bool {
	_, _, _, ok := Parse(taskID)
	return ok
}
