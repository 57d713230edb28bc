package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"herd/api"
)

func runNode(e *env, args []string) error {
	return subcommands(e, "node", args, []command{
		{"list", "list worker nodes", runNodeList},
		{"status", "show a node with its resources and attempts", runNodeStatus},
		{"drain", "stop new placements on a node (-disable to resume)", runNodeDrain},
		{"eligibility", "mark a node eligible or ineligible: eligibility ID true|false", runNodeEligibility},
		{"register", "register a node by hand (agents do this themselves)", runNodeRegister},
		{"tier", "pin a node's tier, or let it follow profile and history: tier ID L1|L2|L3|auto", runNodeTier},
		{"rebench", "ask a node's agent to measure its node again", runNodeRebench},
		{"check", "ask a node's agent to run its health check", runNodeCheck},
	})
}

func resources(r api.Resources) string {
	return fmt.Sprintf("cpu %dm, mem %d MB, gpu %d, disk %d MB", r.CPUMillis, r.MemoryMB, r.GPU, r.DiskMB)
}

// readCommand is a read command once its flags are parsed: the client
// flags, a client of the cluster, how to read (-stale) and the id it was
// given, if it takes one.
type readCommand struct {
	cf   *clientFlags
	cl   *api.Client
	opts api.ReadOptions
	id   string
}

// startRead parses a read command's flags (a list also takes -watch) and
// its one positional argument, an id naming what (none when what is
// empty), and makes its client.
func startRead(e *env, name, summary, what string, args []string) (readCommand, error) {
	usage := ""
	if what != "" {
		usage = "ID"
	}
	fs := newFlags(e, name, usage, summary)
	rc := readCommand{cf: &clientFlags{}}
	rc.cf.register(e, fs, true)
	if strings.HasSuffix(name, " list") {
		fs.BoolVar(&rc.cf.watch, "watch", false, "print the list again whenever it changes, until interrupted")
	}
	stale := fs.Bool("stale", false, "answer from the replica asked, even without a leader (may be behind)")
	if err := parse(e, fs, args); err != nil {
		return rc, err
	}
	switch rest := fs.Args(); {
	case what == "" && len(rest) != 0:
		return rc, usagef("%s takes no arguments", name)
	case what != "" && len(rest) != 1:
		return rc, usagef("%s takes exactly one %s", name, what)
	case what != "":
		rc.id = rest[0]
	}
	rc.opts = api.ReadOptions{Consistent: !*stale}
	var err error
	rc.cl, err = rc.cf.client()
	return rc, err
}

func runNodeList(e *env, args []string) error {
	rc, err := startRead(e, "node list", "List worker nodes with their state and load.", "", args)
	if err != nil {
		return err
	}
	cf, cl := rc.cf, rc.cl
	return cf.watchOr(e, cl, "node", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		nodes, _, err := cl.ListNodes(ctx, rc.opts)
		if err != nil {
			return fmt.Errorf("node list: %w", err)
		}
		if cf.structured() {
			return cf.print(e.stdout, nodes)
		}
		tb := &table{}
		cols := []string{"ID", "VERSION", "MANAGEMENT", "LIVENESS", "SCHEDULING", "TIER", "HEALTH", "ATTEMPTS", "CPU FREE", "MEM FREE", "GPU FREE", "INTERVAL", "MISSED", "LOSS", "ASLEEP"}
		if cf.wide() {
			cols = append(cols, "ADDRESS", "LABELS", "CAPABILITIES", "WEIGHT")
		}
		tb.add(cols...)
		for _, n := range nodes {
			o := n.Observation
			row := []string{n.ID, orDash(n.Version), n.Management, n.Liveness, n.Scheduling, tierText(n), healthText(n), fmt.Sprintf("%d/%d", n.RunningAttempts, n.Slots),
				fmt.Sprintf("%d/%dm", n.Free.CPUMillis, n.Resources.CPUMillis), fmt.Sprintf("%d/%d MB", n.Free.MemoryMB, n.Resources.MemoryMB),
				fmt.Sprintf("%d/%d", n.Free.GPU, n.Resources.GPU), fmt.Sprintf("%dms", o.IntervalMs), strconv.Itoa(o.Misses),
				fmt.Sprintf("%.0f%%", o.Loss*100), strconv.FormatBool(o.Hibernating)}
			if cf.wide() {
				row = append(row, orDash(n.Address), orDash(joinMap(n.Labels)), orDash(capabilityText(n.Capabilities)), strconv.Itoa(n.Weight))
			}
			tb.add(row...)
		}
		tb.write(e.stdout)
		return nil
	})
}

func runNodeStatus(e *env, args []string) error {
	rc, err := startRead(e, "node status", "Show a node: state, labels, capabilities, resources and attempts.", "node id", args)
	if err != nil {
		return err
	}
	cf, cl := rc.cf, rc.cl
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, _, err := cl.GetNode(ctx, rc.id, rc.opts)
	if err != nil {
		return fmt.Errorf("node status: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, n)
	}
	tb := &table{}
	addNodeState(tb, n)
	addNodeJudgement(tb, n)
	images := addNodeContainers(ctx, cl, tb, n)
	tb.write(e.stdout)
	writeNodeSections(e.stdout, n, images)
	return nil
}

// addNodeState adds who the node is and what it holds: state, session,
// labels, capabilities, slots and resources.
func addNodeState(tb *table, n api.Node) {
	tb.add("ID", n.ID)
	tb.add("Version", orDash(n.Version))
	tb.add("Address", n.Address)
	tb.add("Management", n.Management)
	tb.add("Liveness", n.Liveness)
	tb.add("Scheduling", n.Scheduling)
	conds := "none"
	if len(n.Conditions) > 0 {
		parts := make([]string, len(n.Conditions))
		for i, c := range n.Conditions {
			parts[i] = fmt.Sprintf("%s (since %s): %s", c.Type, ago(c.Since), c.Message)
		}
		conds = strings.Join(parts, "; ")
	}
	tb.add("Conditions", conds)
	tb.add("Session", strconv.FormatUint(n.SessionGeneration, 10))
	tb.add("Last heartbeat", ago(n.LastHeartbeat))
	o := n.Observation
	tb.add("Observed", fmt.Sprintf("heartbeat interval %dms, %d missed, loss %.0f%%, gossip %s, hibernating %v",
		o.IntervalMs, o.Misses, o.Loss*100, o.GossipState, o.Hibernating))
	tb.add("Labels", joinMap(n.Labels))
	tb.add("Capabilities", capabilityText(n.Capabilities))
	tb.add("Weight", strconv.Itoa(n.Weight))
	tb.add("Slots", fmt.Sprintf("%d used of %d", n.RunningAttempts, n.Slots))
	tb.add("Total", resources(n.Resources))
	tb.add("Reserved", resources(n.Reserved))
	tb.add("Free", resources(n.Free))
}

// addNodeJudgement adds what the cluster judged of the node: tier,
// health, quarantine, health check, profile, link and datasets.
func addNodeJudgement(tb *table, n api.Node) {
	tier := tierText(n)
	if n.Tier.Base != "" && n.Tier.Base != n.Tier.Tier && !n.Tier.Pinned {
		tier += fmt.Sprintf(" (profile says %s, demoted %d)", n.Tier.Base, n.Tier.Demotions)
	}
	if !n.Tier.ChangedAt.IsZero() {
		tier += ", since " + ago(n.Tier.ChangedAt)
	}
	tb.add("Tier", tier)
	tb.add("Health", fmt.Sprintf("%s: online %.0f%% of the last day, %d of %d recent results failed at work that succeeds elsewhere",
		healthText(n), n.Health.OnlineRatio*100, n.Health.Failures, n.Health.Results))
	quarantine := "no"
	if q := n.Quarantine; q != nil {
		quarantine = fmt.Sprintf("%s until %s: %s", q.Level, q.Until.Local().Format(time.DateTime), q.Reason)
		if q.CheckFailed {
			quarantine += "; held until its health check passes"
		}
	}
	tb.add("Quarantine", quarantine)
	if hc := n.HealthCheck; hc != nil {
		state := "asked, not answered yet"
		if hc.Answered == hc.Requested {
			state = map[bool]string{true: "passed", false: "failed"}[hc.Passed] + " " + ago(hc.At)
			if hc.Output != "" {
				state += ": " + hc.Output
			}
		}
		tb.add("Health check", fmt.Sprintf("#%d (%s): %s", hc.Requested, hc.Why, state))
	}
	tb.add("Profile", profileText(n.Profile))
	if p := n.Profile; p != nil && p.RTTMicros > 0 {
		tb.add("Link", fmt.Sprintf("%d µs round trip to the servers, %d MB/s", p.RTTMicros, p.NetworkMBps))
	}
	if len(n.Datasets) > 0 {
		parts := make([]string, len(n.Datasets))
		for i, d := range n.Datasets {
			parts[i] = fmt.Sprintf("%s (%s)", d.Name, humanBytes(d.Bytes))
		}
		tb.add("Datasets", strings.Join(parts, ", "))
	}
}

// profileText is a node's measured profile in one line.
func profileText(p *api.NodeProfile) string {
	if p == nil {
		return "not measured"
	}
	if !p.Benchmarked {
		return fmt.Sprintf("%d cores, %d MB memory, %d MB disk free (static figures only)", p.Cores, p.MemoryMB, p.DiskFreeMB)
	}
	text := fmt.Sprintf("cpu %d MB/s per core × %d cores, memory %d MB/s, fsync %d µs, %d MB memory, %d MB disk free; measured %s in %d ms",
		p.CPUScore, p.Cores, p.MemoryMBps, p.FsyncMicros, p.MemoryMB, p.DiskFreeMB, ago(p.MeasuredAt), p.BenchMillis)
	if p.Rounds > 0 {
		text += fmt.Sprintf(" (medians of %d round(s); spread cpu %d%%, memory %d%%)", p.Rounds, p.CPUSpreadPct, p.MemorySpreadPct)
	}
	return text
}

// addNodeContainers asks the node's agent, live, for its container
// runtime and image cache, adds them and returns the cached images.
func addNodeContainers(ctx context.Context, cl *api.Client, tb *table, n api.Node) []api.CachedImage {
	ic, err := cl.NodeImages(ctx, n.ID)
	if err != nil {
		tb.add("Containers", fmt.Sprintf("unknown: %v", err))
		return nil
	}
	rt := ic.Runtime + " (capability oci@1)"
	if ic.Runtime == "" {
		rt = ic.RuntimeProblem
	}
	tb.add("Containers", rt)
	tb.add("Image cache", fmt.Sprintf("%s of %s used, %d images; %d pulled, %d from the cache, %d failed",
		humanBytes(ic.UsedBytes), humanBytes(ic.MaxBytes), len(ic.Images), ic.Pulls-ic.Failures, ic.Hits, ic.Failures))
	return ic.Images
}

// writeNodeSections writes the node's tables below its summary: images,
// history by class, events and attempts, each only when it has rows.
func writeNodeSections(w io.Writer, n api.Node, images []api.CachedImage) {
	section := func(title string, header []string, rows int, row func(i int) []string) {
		if rows == 0 {
			return
		}
		fmt.Fprintln(w, "\n"+title)
		t := &table{}
		t.add(header...)
		for i := range rows {
			t.add(row(i)...)
		}
		t.write(w)
	}
	section("Images", []string{"IMAGE", "DIGEST", "SIZE", "LAYERS", "LAST USED", "IN USE"}, len(images), func(i int) []string {
		im := images[i]
		return []string{orDash(strings.Join(im.Names, ", ")), im.Digest, humanBytes(im.Bytes), strconv.Itoa(im.Layers), ago(im.LastUsed), strconv.Itoa(im.InUse)}
	})
	section("History by class", []string{"CLASS", "RUNS", "FAILURES", "TYPICAL", "FLEET MEDIAN", "RECENT", "FAST FAILS IN A ROW"}, len(n.History), func(i int) []string {
		c := n.History[i]
		recent := make([]string, len(c.RecentMillis))
		for i, ms := range c.RecentMillis {
			recent[i] = (time.Duration(ms) * time.Millisecond).String()
		}
		return []string{c.Class, strconv.FormatInt(c.Runs, 10), strconv.FormatInt(c.Failures, 10), (time.Duration(c.EWMAMillis) * time.Millisecond).String(),
			(time.Duration(c.FleetMedianMillis) * time.Millisecond).String(), strings.Join(recent, " "), strconv.Itoa(c.FastStreak)}
	})
	section("Events", []string{"TIME", "INDEX", "EVENT", "DETAIL"}, len(n.Events), func(i int) []string {
		x := n.Events[i]
		return []string{ago(x.Time), strconv.FormatUint(x.Index, 10), x.Kind, x.Message}
	})
	section("Attempts", []string{"ID", "#", "STATE", "LEASE", "RESERVED", "FINISHED"}, len(n.Attempts), func(i int) []string {
		a := n.Attempts[i]
		return []string{a.ID, strconv.Itoa(a.Number), a.State, strconv.FormatUint(a.LeaseVersion, 10), ago(a.ReservedAt), ago(a.FinishedAt)}
	})
}

// tierText is a node's tier as the list shows it: "L2", "L1 (pinned)".
func tierText(n api.Node) string {
	switch {
	case n.Tier.Tier == "":
		return "-"
	case n.Tier.Pinned:
		return n.Tier.Tier + " (pinned)"
	}
	return n.Tier.Tier
}

// healthText is a node's health in a word: quarantined, or its score.
func healthText(n api.Node) string {
	if n.Quarantine != nil {
		return "QUARANTINED"
	}
	return fmt.Sprintf("%.2f", n.Health.Score)
}

func humanBytes(b int64) string {
	const unit = 1000
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(b)/float64(div), "kMGTPE"[exp])
}

func runNodeTier(e *env, args []string) error {
	c := newClientCommand(e, "node tier", "ID L1|L2|L3|auto", "Pin a node's tier (history no longer moves it), or let it follow its profile and history again (auto).", true)
	cl, err := c.start(e, args, 2, "node tier takes a node id and L1, L2, L3 or auto")
	if err != nil {
		return err
	}
	fs, cf := c.fs, &c.cf
	switch fs.Arg(1) {
	case "L1", "L2", "L3", "auto":
	default:
		return usagef("node tier: %q is not L1, L2, L3 or auto", fs.Arg(1))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := cl.SetNodeTier(ctx, fs.Arg(0), fs.Arg(1))
	if err != nil {
		return fmt.Errorf("node tier: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, n)
	}
	fmt.Fprintf(e.stdout, "Node %s is tier %s\n", n.ID, tierText(n))
	return nil
}

func runNodeRebench(e *env, args []string) error {
	return nodeRequest(e, args, "rebench", "Ask a node's agent to measure its node again; the profile shows in node status once it reports.",
		func(ctx context.Context, cl *api.Client, id string) (api.Node, error) {
			return cl.RequestRebench(ctx, id)
		},
		"Node %s will measure itself again\n", nil)
}

func runNodeCheck(e *env, args []string) error {
	return nodeRequest(e, args, "check", "Ask a node's agent to run its health check; the answer shows in node status.",
		func(ctx context.Context, cl *api.Client, id string) (api.Node, error) {
			return cl.RequestHealthCheck(ctx, id)
		},
		"Node %s will run health check %d\n", func(n api.Node) uint64 {
			if n.HealthCheck == nil {
				return 0
			}
			return n.HealthCheck.Requested
		})
}

// nodeRequest runs a command that asks something of one node.
func nodeRequest(e *env, args []string, name, summary string, do func(context.Context, *api.Client, string) (api.Node, error), done string, seq func(api.Node) uint64) error {
	c := newClientCommand(e, "node "+name, "ID", summary, true)
	cl, err := c.start(e, args, 1, "node "+name+" takes exactly one node id")
	if err != nil {
		return err
	}
	fs, cf := c.fs, &c.cf
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := do(ctx, cl, fs.Arg(0))
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	if cf.structured() {
		return cf.print(e.stdout, n)
	}
	if strings.Count(done, "%") == 1 {
		fmt.Fprintf(e.stdout, done, n.ID)
	} else {
		fmt.Fprintf(e.stdout, done, n.ID, seq(n))
	}
	return nil
}

func joinMap(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for k, v := range m {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func runNodeDrain(e *env, args []string) error {
	c := newClientCommand(e, "node drain", "ID", "Stop new placements on a node; attempts already there run to the end.", false)
	disable := c.fs.Bool("disable", false, "stop draining: accept new placements again")
	cl, err := c.start(e, args, 1, "node drain takes exactly one node id")
	if err != nil {
		return err
	}
	fs := c.fs
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := cl.DrainNode(ctx, fs.Arg(0), !*disable)
	if err != nil {
		return fmt.Errorf("node drain: %w", err)
	}
	fmt.Fprintf(e.stdout, "Node %s is %s (%d attempts still live)\n", n.ID, n.Management, n.RunningAttempts)
	return nil
}

func runNodeEligibility(e *env, args []string) error {
	c := newClientCommand(e, "node eligibility", "ID true|false", "Mark a node eligible or ineligible for new attempts.", false)
	cl, err := c.start(e, args, 2, "node eligibility takes a node id and true or false")
	if err != nil {
		return err
	}
	fs := c.fs
	eligible, err := strconv.ParseBool(fs.Arg(1))
	if err != nil {
		return usagef("node eligibility: %q is not true or false", fs.Arg(1))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := cl.SetNodeEligibility(ctx, fs.Arg(0), eligible)
	if err != nil {
		return fmt.Errorf("node eligibility: %w", err)
	}
	fmt.Fprintf(e.stdout, "Node %s is %s\n", n.ID, n.Scheduling)
	return nil
}

func runNodeRegister(e *env, args []string) error {
	fs := newFlags(e, "node register", "ID", "Register a node by hand, for trying the scheduler without agents.")
	var cf clientFlags
	cf.register(e, fs, true)
	cpu := fs.Int64("cpu-millis", 1000, "CPU in millicores")
	mem := fs.Int64("memory-mb", 1024, "memory in MB")
	gpu := fs.Int64("gpu", 0, "GPU units")
	disk := fs.Int64("disk-mb", 1024, "disk in MB")
	slots := fs.Int("slots", 2, "attempts that may run at once")
	weight := fs.Int("weight", 0, "scheduling weight (default 100)")
	caps := fs.String("capabilities", "exec@1", "comma-separated name@version list")
	labels := kvFlag{}
	fs.Var(labels, "labels", "labels k=v,k=v")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usagef("node register takes exactly one node id")
	}
	capMap, err := parseCapabilities(*caps)
	if err != nil {
		return err
	}
	cl, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cl.RegisterNode(ctx, api.NodeRegistration{NodeSpec: api.NodeSpec{
		ID: fs.Arg(0), Labels: labels, Capabilities: capMap, Slots: *slots, Weight: *weight,
		Resources: api.Resources{CPUMillis: *cpu, MemoryMB: *mem, GPU: *gpu, DiskMB: *disk},
	}})
	if err != nil {
		return fmt.Errorf("node register: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, res)
	}
	fmt.Fprintf(e.stdout, "Registered %s, session %d\n", res.NodeID, res.SessionGeneration)
	return nil
}

// parseCapabilities reads "exec@1,gpu-infer@2,gpu-infer@3".
func parseCapabilities(s string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, c := range strings.Split(s, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		name, version, ok := strings.Cut(c, "@")
		if !ok || name == "" || version == "" {
			return nil, usagef("capability %q must be name@version", c)
		}
		out[name] = append(out[name], version)
	}
	return out, nil
}

func runExplain(e *env, args []string) error {
	fs := newFlags(e, "explain", "[ID | task flags]", "Explain placement, node by node. With a task id: why that task waits (or\nwhere it would go). With task flags (those of 'task submit'): a what-if for a\ntask that is not submitted, optionally under another -heartbeat-ttl.")
	var cf clientFlags
	cf.register(e, fs, true)
	build := specFlags(fs)
	ttl := fs.Duration("heartbeat-ttl", 0, "what-if: heartbeat TTL instead of the server's")
	stale := fs.Bool("stale", false, "answer from the replica asked, even without a leader (may be behind)")
	if err := parse(e, fs, args); err != nil {
		return err
	}
	cl, err := cf.client()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ro := api.ReadOptions{Consistent: !*stale}
	var ex api.Explanation
	if fs.NArg() == 1 && !strings.Contains(strings.Join(args, " "), "--") {
		ex, err = cl.ExplainTask(ctx, fs.Arg(0), ro)
	} else {
		spec, berr := build(fs.Args())
		if berr != nil {
			return berr
		}
		req := api.ExplainRequest{TaskSpec: spec}
		if *ttl != 0 {
			if *ttl < time.Second {
				return usagef("-heartbeat-ttl must be at least 1s")
			}
			secs := int64(*ttl / time.Second)
			req.HeartbeatTTLSeconds = &secs
		}
		ex, err = cl.Explain(ctx, req, ro)
	}
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	if cf.structured() {
		return cf.print(e.stdout, ex)
	}
	fmt.Fprintln(e.stdout, ex.Summary)
	tb := &table{}
	tb.add("NODE", "TIER", "ELIGIBLE", "SCORE", "PARTS", "REASONS")
	for _, n := range ex.Nodes {
		score, parts := "-", ""
		if n.Score != nil {
			score = strconv.FormatInt(*n.Score, 10)
		}
		if p := n.Parts; p != nil {
			// Locality counts only for a task with inputs (the API then
			// says how much of them the node holds).
			locality := "n/a (no inputs)"
			if p.Inputs != "" {
				locality = strconv.FormatFloat(p.Locality, 'f', 2, 64)
			}
			parts = fmt.Sprintf("reference %d + profile %d (capacity %.2f, health %.2f, locality %s, history %.2f)",
				p.Reference, p.Profile, p.Capacity, p.Health, locality, p.History)
			if p.Inputs != "" {
				parts += "; " + p.Inputs
			}
		}
		tier := n.Tier
		if tier == "" {
			tier = "-"
		}
		tb.add(n.NodeID, tier, strconv.FormatBool(n.Eligible), score, parts, strings.Join(n.Reasons, "; "))
	}
	fmt.Fprintln(e.stdout)
	tb.write(e.stdout)
	return nil
}

// capabilityText writes capabilities as name@versions, by name.
func capabilityText(caps map[string][]string) string {
	parts := make([]string, 0, len(caps))
	for name, vs := range caps {
		parts = append(parts, name+"@"+strings.Join(vs, ","))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
