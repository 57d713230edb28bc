package fsm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"herd/scheduler"
)

// snapshotFormat names the stream Persist writes: one JSON header line
// naming the format, its version and the applied index, then the records,
// tables in a fixed order and records in id order, so equal states give
// byte-identical snapshots. Version 1 (snapshotJSON) is a JSON line per
// record; version 2 (snapshotFramed, snapshot_framed.go) frames each
// record by its kind and length and writes tasks and attempts in the
// binary form, each distinct task shape once. A replica reads both and
// writes version 2 once every server records that it reads it (command
// forms 4): a server of an older build receiving a snapshot must be able
// to read it.
const (
	snapshotFormat = "herd-state"
	snapshotJSON   = 1
	snapshotFramed = 2
)

type snapshotHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	Index   uint64 `json:"index"`
}

type snapshotRecord struct {
	Table  string          `json:"table"`
	Record json.RawMessage `json:"record"`
}

// snapshotTables is the order tables are written in.
const (
	tableServers  = "servers"
	tableNodes    = "nodes"
	tableTasks    = "tasks"
	tableAttempts = "attempts"
	tableACL      = "acl"
	tableTokens   = "acl_tokens"
	tableAudit    = "audit"
	tableKeyring  = "gossip_keyring"
	tableClasses  = "classes"
	tableProfile  = "profile_settings"
	tableFleet    = "fleet"
	tableJobs     = "jobs"
)

// snapshotVersion is the version Persist writes for s: version 2 once
// every server of the cluster records that it reads it, version 1 before
// (a rolling upgrade under way, or a state without servers).
func (s *State) snapshotVersion() int {
	if s.EveryServerReads(FormsFramedSnapshot) {
		return snapshotFramed
	}
	return snapshotJSON
}

// writeSnapshot writes s in the version every server reads (Persist).
func writeSnapshot(w io.Writer, s *State) error { return writeSnapshotAs(w, s, s.snapshotVersion()) }

// writeSnapshotAs writes s in the given snapshot version.
func writeSnapshotAs(w io.Writer, s *State, version int) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	if err := json.NewEncoder(bw).Encode(snapshotHeader{Format: snapshotFormat, Version: version, Index: s.index}); err != nil {
		return fmt.Errorf("write header: %w", err)
	}
	if version != snapshotFramed {
		if err := s.eachRecord(jsonLines{bw}); err != nil {
			return err
		}
		return bw.Flush()
	}
	sink := newFramedSink(bw)
	if err := s.eachRecord(sink); err != nil {
		return err
	}
	if err := sink.end(); err != nil {
		return err
	}
	return bw.Flush()
}

// recordSink takes a snapshot's records in order: tasks and attempts by
// their own methods, every other table's records as JSON values.
type recordSink interface {
	record(table string, rec any) error
	task(t *Task) error
	attempt(a *Attempt) error
}

// eachRecord gives out every record of s: tables in snapshot order,
// records in id order.
func (s *State) eachRecord(out recordSink) error {
	var werr error
	write := func(table string, rec any) bool {
		werr = out.record(table, rec)
		return werr == nil
	}
	s.st.servers.Ascend(func(v *Server) bool { return write(tableServers, v) })
	if werr == nil {
		s.st.nodes.Ascend(func(v *Node) bool { return write(tableNodes, s.st.current(v)) })
	}
	if werr == nil {
		s.st.tasks.Ascend(func(v *Task) bool { werr = out.task(v); return werr == nil })
	}
	if werr == nil {
		s.st.attempts.Ascend(func(v *Attempt) bool { werr = out.attempt(v); return werr == nil })
	}
	// The ACL tables are written only once ACLs are in use, so that the
	// snapshots of a cluster without them keep their form.
	if werr == nil && s.st.acl.meta.BootstrapIndex != 0 {
		write(tableACL, s.st.acl.meta)
	}
	if werr == nil {
		s.st.acl.tokens.Ascend(func(v *ACLToken) bool { return write(tableTokens, v) })
	}
	if werr == nil {
		s.st.acl.audit.Ascend(func(v *AuditRecord) bool { return write(tableAudit, v) })
	}
	if werr == nil && s.st.keyring.Index != 0 {
		write(tableKeyring, s.st.keyring)
	}
	if werr == nil {
		s.st.classes.Ascend(func(v *ClassStats) bool { return write(tableClasses, v) })
	}
	if werr == nil && s.st.profile != nil {
		write(tableProfile, s.st.profile)
	}
	if werr == nil && s.st.fleet != nil {
		write(tableFleet, s.st.fleet)
	}
	if werr == nil {
		s.st.jobs.Ascend(func(v *Job) bool { return write(tableJobs, v) })
	}
	return werr
}

// jsonLines writes records as version 1 does: a JSON line each.
type jsonLines struct{ bw *bufio.Writer }

func (j jsonLines) task(t *Task) error       { return j.record(tableTasks, t.toJSON()) }
func (j jsonLines) attempt(a *Attempt) error { return j.record(tableAttempts, a) }

func (j jsonLines) record(table string, rec any) error {
	body, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode %s record: %w", table, err)
	}
	// What a JSON encoder writes for snapshotRecord{table, body}, without
	// scanning the record a second time (Marshal's output is compact and
	// HTML-escaped already, as the encoder would leave it).
	j.bw.WriteString(recordPrefix)
	j.bw.WriteString(table)
	j.bw.WriteString(recordInfix)
	j.bw.Write(body)
	if _, err := j.bw.WriteString("}\n"); err != nil {
		return fmt.Errorf("write %s record: %w", table, err)
	}
	return nil
}

// A record line as version 1 frames it: recordPrefix, the table,
// recordInfix, the record, "}".
const (
	recordPrefix = `{"table":"`
	recordInfix  = `","record":`
)

func readSnapshot(r io.Reader) (*store, uint64, error) {
	lines := snapshotLines{r: bufio.NewReaderSize(r, 256<<10)}
	first, err := lines.next()
	if err != nil {
		return nil, 0, fmt.Errorf("read header: %w", err)
	}
	var hdr snapshotHeader
	if err := json.Unmarshal(first, &hdr); err != nil {
		return nil, 0, fmt.Errorf("read header: %w", err)
	}
	if hdr.Format != snapshotFormat || hdr.Version < snapshotJSON || hdr.Version > snapshotFramed {
		return nil, 0, fmt.Errorf("unsupported snapshot %q version %d (this build reads %q versions %d to %d)",
			hdr.Format, hdr.Version, snapshotFormat, snapshotJSON, snapshotFramed)
	}
	db := newStore()
	if hdr.Version == snapshotFramed {
		if err := readFramed(lines.r, db); err != nil {
			return nil, 0, err
		}
		clear(db.w.touched)
		return db, hdr.Index, nil
	}
	for n := 0; ; n++ {
		line, err := lines.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read record %d: %w", n, err)
		}
		rec, err := splitRecord(line)
		if err == nil {
			err = decodeRecord(db, rec)
		}
		if err != nil {
			return nil, 0, fmt.Errorf("record %d: %w", n, err)
		}
	}
	clear(db.w.touched)
	return db, hdr.Index, nil
}

// splitRecord reads a record line: in version 1's framing by slicing
// it (so a restore decodes each record once, not the frame as JSON and
// then the record again), any other JSON object by decoding it. The record is
// decoded (and checked) by decodeRecord.
func splitRecord(line []byte) (snapshotRecord, error) {
	if rest, ok := bytes.CutPrefix(line, []byte(recordPrefix)); ok {
		if i := bytes.Index(rest, []byte(recordInfix)); i > 0 && rest[len(rest)-1] == '}' {
			if table := rest[:i]; bytes.IndexAny(table, `"\`) < 0 {
				return snapshotRecord{Table: string(table), Record: rest[i+len(recordInfix) : len(rest)-1]}, nil
			}
		}
	}
	var rec snapshotRecord
	if err := json.Unmarshal(line, &rec); err != nil {
		return rec, fmt.Errorf("not a record line: %w", err)
	}
	return rec, nil
}

// snapshotLines reads a snapshot's lines, skipping blank ones.
type snapshotLines struct {
	r    *bufio.Reader
	long []byte // a line longer than the reader's buffer, joined
}

// next returns the next non-blank line without its end, valid until the
// next call; io.EOF after the last.
func (l *snapshotLines) next() ([]byte, error) {
	for {
		line, err := l.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			l.long = append(l.long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = l.r.ReadSlice('\n')
				l.long = append(l.long, line...)
			}
			line = l.long
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if trimmed := bytes.TrimSpace(line); len(trimmed) > 0 {
			return trimmed, nil
		}
		if err != nil {
			return nil, err // io.EOF
		}
	}
}

// decodeRecord decodes one record and puts it into db.
func decodeRecord(db *store, rec snapshotRecord) error {
	switch rec.Table {
	case tableServers:
		return decodeInto(rec, func(v *Server) string { return v.ID }, db.putServer)
	case tableNodes:
		return decodeInto(rec, func(v *Node) string { return v.ID }, func(n *Node) {
			if n.History != nil {
				n.History.syncTimes()
			}
			if n.RunningAttempts != 0 || n.Reserved != (scheduler.Resources{}) {
				db.setUsage(n.ID, n.Reserved, n.RunningAttempts, n.ModifyIndex)
			}
			db.putNode(n)
		})
	case tableTasks:
		var err error
		derr := decodeInto(rec, func(v *taskJSON) string { return v.ID }, func(j *taskJSON) {
			t := new(Task)
			if err = t.fromJSON(j); err == nil {
				db.w.interner.task(t, nil, false)
				db.putTask(t)
			}
		})
		if derr == nil && err != nil {
			derr = fmt.Errorf("decode %s record: %w", rec.Table, err)
		}
		return derr
	case tableAttempts:
		return decodeInto(rec, func(v *Attempt) string { return v.ID }, db.putAttempt)
	case tableACL:
		return decodeInto(rec, func(v *aclMeta) string { return v.ID }, func(v *aclMeta) { db.acl.meta = *v })
	case tableTokens:
		return decodeInto(rec, func(v *ACLToken) string { return v.AccessorID }, db.putToken)
	case tableKeyring:
		return decodeInto(rec, func(v *GossipKeyring) string {
			if v.Index == 0 {
				return ""
			}
			return "keyring"
		}, func(v *GossipKeyring) { db.keyring = *v })
	case tableClasses:
		return decodeInto(rec, func(v *ClassStats) string { return v.Class }, db.putClass)
	case tableProfile:
		return decodeInto(rec, func(v *ProfileSettings) string { return "profile" }, func(v *ProfileSettings) { db.profile = v })
	case tableFleet:
		return decodeInto(rec, func(v *ClassStats) string { return "fleet" }, func(v *ClassStats) { db.fleet = v })
	case tableJobs:
		return decodeInto(rec, func(v *Job) string { return v.ID }, db.putJob)
	case tableAudit:
		return decodeInto(rec, func(v *AuditRecord) string {
			if v.Index == 0 {
				return ""
			}
			return "audit"
		}, db.putAudit)
	default:
		return fmt.Errorf("unknown table %q", rec.Table)
	}
}

// decodeInto decodes rec as an R, refuses it without an id, and stores it.
func decodeInto[R any](rec snapshotRecord, id func(*R) string, put func(*R)) error {
	v := new(R)
	if err := json.Unmarshal(rec.Record, v); err != nil {
		return fmt.Errorf("decode %s record: %w", rec.Table, err)
	}
	if id(v) == "" {
		return fmt.Errorf("%s record without id", rec.Table)
	}
	put(v)
	return nil
}

// Hash returns a digest of the state, of its snapshot in version 1.
// Replicas at the same applied index must return the same hash.
func (s *State) Hash() (string, error) {
	h := sha256.New()
	if err := writeSnapshotAs(h, s, snapshotJSON); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Dump writes the state as a snapshot in version 1, a JSON line per
// record (for tests and debugging).
func (s *State) Dump(w io.Writer) error { return writeSnapshotAs(w, s, snapshotJSON) }
