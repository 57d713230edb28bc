package fsm

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	memdb "github.com/hashicorp/go-memdb"
)

// snapshotFormat names the stream layout written by Persist: one JSON
// header line, then one JSON line per record, tables in a fixed order and
// records in id order, so equal states give byte-identical snapshots.
const (
	snapshotFormat  = "herd-state"
	snapshotVersion = 1
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
var snapshotTables = []string{tableServers, tableNodes, tableTasks, tableAttempts}

func writeSnapshot(w io.Writer, s *State) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(snapshotHeader{Format: snapshotFormat, Version: snapshotVersion, Index: s.index}); err != nil {
		return fmt.Errorf("write header: %w", err)
	}
	for _, table := range snapshotTables {
		it, err := s.txn.Get(table, "id")
		if err != nil {
			return fmt.Errorf("scan %s: %w", table, err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			body, err := json.Marshal(raw)
			if err != nil {
				return fmt.Errorf("encode %s record: %w", table, err)
			}
			if err := enc.Encode(snapshotRecord{Table: table, Record: body}); err != nil {
				return fmt.Errorf("write %s record: %w", table, err)
			}
		}
	}
	return bw.Flush()
}

func readSnapshot(r io.Reader) (*memdb.MemDB, uint64, error) {
	dec := json.NewDecoder(bufio.NewReaderSize(r, 256<<10))
	var hdr snapshotHeader
	if err := dec.Decode(&hdr); err != nil {
		return nil, 0, fmt.Errorf("read header: %w", err)
	}
	if hdr.Format != snapshotFormat || hdr.Version != snapshotVersion {
		return nil, 0, fmt.Errorf("unsupported snapshot %q version %d", hdr.Format, hdr.Version)
	}
	db := newMemDB()
	txn := db.Txn(true)
	defer txn.Abort()
	for n := 0; ; n++ {
		var rec snapshotRecord
		err := dec.Decode(&rec)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read record %d: %w", n, err)
		}
		obj, err := decodeRecord(rec)
		if err != nil {
			return nil, 0, fmt.Errorf("record %d: %w", n, err)
		}
		if err := txn.Insert(rec.Table, obj); err != nil {
			return nil, 0, fmt.Errorf("insert record %d into %s: %w", n, rec.Table, err)
		}
	}
	txn.Commit()
	return db, hdr.Index, nil
}

func decodeRecord(rec snapshotRecord) (any, error) {
	var obj any
	var id string
	switch rec.Table {
	case tableServers:
		v := &Server{}
		obj = v
		if err := json.Unmarshal(rec.Record, v); err != nil {
			return nil, fmt.Errorf("decode server: %w", err)
		}
		id = v.ID
	case tableNodes:
		v := &Node{}
		obj = v
		if err := json.Unmarshal(rec.Record, v); err != nil {
			return nil, fmt.Errorf("decode node: %w", err)
		}
		id = v.ID
	case tableTasks:
		v := &Task{}
		obj = v
		if err := json.Unmarshal(rec.Record, v); err != nil {
			return nil, fmt.Errorf("decode task: %w", err)
		}
		id = v.ID
	case tableAttempts:
		v := &Attempt{}
		obj = v
		if err := json.Unmarshal(rec.Record, v); err != nil {
			return nil, fmt.Errorf("decode attempt: %w", err)
		}
		id = v.ID
	default:
		return nil, fmt.Errorf("unknown table %q", rec.Table)
	}
	if id == "" {
		return nil, fmt.Errorf("%s record without id", rec.Table)
	}
	return obj, nil
}

// Hash returns a digest of the state as it would be snapshotted. Replicas
// at the same applied index must return the same hash.
func (s *State) Hash() (string, error) {
	h := sha256.New()
	if err := writeSnapshot(h, s); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Dump writes the state in snapshot format (for tests and debugging).
func (s *State) Dump(w io.Writer) error { return writeSnapshot(w, s) }
