package cluster

import (
	"context"
	"errors"
	"fmt"
	"github.com/hashicorp/go-hclog"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // schedules name time zones; a node may lack the zone files

	"github.com/robfig/cron/v3"

	"herd/api"
	"herd/fsm"
	"herd/scheduler"
	"herd/spec"
)

// cronParser reads cron expressions with an optional seconds field and
// the descriptors (@every 30s, @hourly, …). robfig/cron is used for its
// parser and its Next, which handle the calendar (months, weekdays, zone
// transitions) that a hand-written one would get wrong; herd runs no cron
// of its own: the leader fires slots through Raft.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseSchedule checks a schedule and returns it ready to compute slots.
func parseSchedule(sc *spec.Schedule) (cron.Schedule, *time.Location, error) {
	loc := time.UTC
	if sc.TimeZone != "" {
		l, err := time.LoadLocation(sc.TimeZone)
		if err != nil {
			return nil, nil, fmt.Errorf("schedule: time zone %q: %v", sc.TimeZone, err)
		}
		loc = l
	}
	s, err := cronParser.Parse(sc.Cron)
	if err != nil {
		return nil, nil, fmt.Errorf("schedule: cron %q: %v", sc.Cron, err)
	}
	return s, loc, nil
}

// maxCatchUp bounds the missed slots the leader counts after an outage.
const maxCatchUp = 10_000

// due says what to do now about a scheduled job: the slot to handle (the
// latest one due), whether to run it, and why; ok is false when no slot
// is due. A slot is on time when it came at most onTime ago; slots missed
// before it follow the catch-up policy: skipped, or, with run_once, the
// latest of them runs once, now.
func due(j *fsm.Job, s cron.Schedule, loc *time.Location, now time.Time, onTime time.Duration) (slot time.Time, run bool, outcome string, ok bool) {
	next := s.Next(j.LastSlot.Time().In(loc))
	if next.IsZero() || next.After(now) {
		return time.Time{}, false, "", false
	}
	missed := 0
	for {
		after := s.Next(next)
		if after.IsZero() || after.After(now) || missed >= maxCatchUp {
			break
		}
		next = after
		missed++
	}
	late := now.Sub(next)
	// Every outcome says how late the firing is, so "on time" is checked
	// against the figure beside it.
	lateText := late.Round(time.Millisecond).String() + " after its slot"
	switch {
	case late <= onTime && missed == 0:
		return next, true, "on time, fired " + lateText, true
	case late <= onTime && j.Spec.Schedule.CatchUp == spec.CatchUpRunOnce:
		return next, true, fmt.Sprintf("caught up: %d slots missed while no leader fired them, run once with this one, on time, fired %s", missed, lateText), true
	case late <= onTime:
		return next, true, fmt.Sprintf("on time, fired %s; %d earlier slots missed while no leader fired them were skipped", lateText, missed), true
	case j.Spec.Schedule.CatchUp == spec.CatchUpRunOnce:
		return next, true, fmt.Sprintf("caught up: %d slots missed while no leader fired them, run once %s late", missed+1, late.Round(time.Millisecond)), true
	}
	return next, false, fmt.Sprintf("skipped: %d slots missed while no leader fired them (catch up skip)", missed+1), true
}

// scheduleTick is how often the leader looks for slots due.
const scheduleTick = 100 * time.Millisecond

// cronLoop is the leader's part in schedules, made when leadership
// starts: over the replica it leads, it fires every slot due,
// each through one committed command carrying the slot, which the FSM
// refuses for a slot at or before the latest handled: a leader change
// never fires one twice, and slots missed while no leader existed follow
// their job's catch-up policy, recorded in its firings.
type cronLoop struct {
	r      proposer
	logger hclog.Logger
}

func (l *cronLoop) run(ctx context.Context) {
	parsed := map[string]cron.Schedule{}
	zones := map[string]*time.Location{}
	for ctx.Err() == nil {
		sleepCtx(ctx, scheduleTick)
		st := l.r.State()
		// Only the scheduled and running jobs: a schedule's finished runs
		// accumulate, and a tick must not cost more as they do.
		active := st.ActiveJobs()
		var outputs *outputHolders
		for _, j := range active {
			if j.State == fsm.JobRunning {
				if outputs == nil {
					outputs = holdersOf(st)
				}
				l.rerunLostOutputs(ctx, st, j, outputs)
			}
			if j.State != fsm.JobScheduled || j.Spec.Schedule == nil {
				continue
			}
			sched, ok := parsed[j.ID]
			if !ok {
				var loc *time.Location
				var err error
				if sched, loc, err = parseSchedule(j.Spec.Schedule); err != nil {
					l.logger.Error("a committed schedule does not parse", "job", j.ID, "error", err)
					continue
				}
				parsed[j.ID], zones[j.ID] = sched, loc
			}
			now := l.r.Now().UTC()
			slot, run, outcome, isDue := due(j, sched, zones[j.ID], now, time.Second)
			if !isDue {
				continue
			}
			_, _, err := l.r.apply(ctx, fsm.MsgFireJob, fsm.FireJobRequest{JobID: j.ID, Slot: slot, Run: run, Outcome: outcome, Now: now})
			switch {
			case err == nil:
				l.logger.Info("schedule fired", "job", j.ID, "slot", slot, "run", run, "outcome", outcome)
			case errors.Is(err, api.ErrConflict) || ctx.Err() != nil:
			default:
				l.logger.Warn("could not fire a schedule", "job", j.ID, "slot", slot, "error", err)
			}
		}
		if len(parsed) > len(active) {
			// Schedules of jobs no longer scheduled are not needed again.
			keep := make(map[string]bool, len(active))
			for _, j := range active {
				keep[j.ID] = true
			}
			for id := range parsed {
				if !keep[id] {
					delete(parsed, id)
					delete(zones, id)
				}
			}
		}
	}
}

// nextFiring is when a scheduled job fires next.
func nextFiring(j *fsm.Job) time.Time {
	if j.State != fsm.JobScheduled || j.Spec.Schedule == nil {
		return time.Time{}
	}
	s, loc, err := parseSchedule(j.Spec.Schedule)
	if err != nil {
		return time.Time{}
	}
	return s.Next(j.LastSlot.Time().In(loc)).UTC()
}

// outputHolders is what the fleet holds of the jobs' outputs, read once
// per tick for every running job: the datasets some live node holds, and
// the nodes that are DOWN.
type outputHolders struct {
	live map[string]bool
	down []string
}

func holdersOf(st *fsm.State) *outputHolders {
	h := &outputHolders{live: map[string]bool{}}
	nodes, err := st.Nodes()
	if err != nil {
		return h
	}
	for _, n := range nodes {
		if n.Liveness == scheduler.LivenessDown {
			h.down = append(h.down, n.ID)
			continue
		}
		for _, d := range n.Datasets {
			h.live[d.Name] = true
		}
	}
	return h
}

// rerunLostOutputs asks for the rerun of finished stage instances whose
// outputs a waiting stage task needs while no live node holds them (the
// node that made them is DOWN). Apply checks it again.
func (l *cronLoop) rerunLostOutputs(ctx context.Context, st *fsm.State, j *fsm.Job, h *outputHolders) {
	if len(h.down) == 0 {
		return
	}
	lost := map[string][]int{} // producing stage → instances
	why := map[string]string{}
	for _, stage := range j.Stages {
		if stage.State != fsm.StageRunning {
			continue
		}
		for _, id := range stage.TaskIDs {
			t, err := st.Task(id)
			if err != nil || t.State != fsm.TaskPending {
				continue
			}
			for _, in := range t.Spec.Inputs {
				if h.live[in] {
					continue
				}
				producer, _, _ := strings.Cut(in, ":")
				_, p, k, ok := fsm.JobOfTask(producer)
				if !ok || p >= len(j.Stages) || j.Stages[p].State != fsm.StageSucceeded || slices.Contains(lost[j.Stages[p].Name], k) {
					continue
				}
				lost[j.Stages[p].Name] = append(lost[j.Stages[p].Name], k)
				why[j.Stages[p].Name] = fmt.Sprintf("stage %s needs %s, which no live node holds (down: %s)", stage.Name, in, strings.Join(h.down, ", "))
			}
		}
	}
	for name, instances := range lost {
		slices.Sort(instances)
		_, _, err := l.r.apply(ctx, fsm.MsgRerunStage, fsm.RerunStageRequest{JobID: j.ID, Stage: name, Instances: instances, Reason: why[name], Now: l.r.Now().UTC()})
		switch {
		case err == nil:
			l.logger.Info("stage rerun: its outputs were lost", "job", j.ID, "stage", name, "instances", instances, "why", why[name])
		case errors.Is(err, api.ErrConflict) || ctx.Err() != nil:
		default:
			l.logger.Warn("could not rerun a stage", "job", j.ID, "stage", name, "error", err)
		}
	}
}
