// Package stageid names what a job's stages leave behind: the id of a
// stage instance's task, which tells its job, and the dataset a stage's
// output is held under on its node. The replicated state makes these
// names and the agents read them, so both use this package.
package stageid

import (
	"strconv"
	"strings"
)

// TaskID is the id of instance of stage (by position) of job, in the
// stage's generation (0 at first; each rerun of the stage makes a new
// one, so a rerun's tasks never reuse an id).
func TaskID(job string, stage, instance, gen int) string {
	id := job + "." + strconv.Itoa(stage) + "." + strconv.Itoa(instance)
	if gen > 0 {
		id += "." + strconv.Itoa(gen)
	}
	return id
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
	if inst, gen, hasGen := strings.Cut(i, "."); hasGen {
		if _, err := strconv.Atoi(gen); err != nil {
			return "", 0, 0, false
		}
		i = inst
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
