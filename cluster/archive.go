package cluster

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"herd/api"
)

// A snapshot archive, as saved and restored by operators, is a gzip stream
// of: one JSON header line, exactly Size bytes of FSM snapshot, then a
// line with the SHA-256 of those bytes. A truncated or altered archive is
// refused before anything is restored.
const archiveFormat = "herd-snapshot"

type archiveHeader struct {
	Format    string    `json:"format"`
	Version   int       `json:"version"`
	Index     uint64    `json:"index"`
	Term      uint64    `json:"term"`
	Size      int64     `json:"size"`
	Snapshot  int       `json:"snapshot_version"`
	CreatedAt time.Time `json:"created_at"`
	ServerID  string    `json:"server_id"`
}

// SnapshotSave takes a fresh snapshot (or reuses the newest when nothing
// changed since) and streams it as an archive (leader-only).
func (s *Server) SnapshotSave(ctx context.Context, w io.Writer) error {
	if !s.IsLeader() {
		return fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	var (
		meta *raft.SnapshotMeta
		rc   io.ReadCloser
	)
	f := s.raft.Snapshot()
	err := f.Error()
	switch {
	case err == nil:
		meta, rc, err = f.Open()
		if err != nil {
			return fmt.Errorf("open new snapshot: %w", err)
		}
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
		metas, lerr := s.snaps.List()
		if lerr != nil || len(metas) == 0 {
			return fmt.Errorf("no snapshot available: %v", lerr)
		}
		meta, rc, err = s.snaps.Open(metas[0].ID)
		if err != nil {
			return fmt.Errorf("open snapshot %s: %w", metas[0].ID, err)
		}
	default:
		return s.raftErr("snapshot", err)
	}
	defer rc.Close()

	gz := gzip.NewWriter(w)
	hdr := archiveHeader{Format: archiveFormat, Version: 1, Index: meta.Index, Term: meta.Term, Size: meta.Size,
		Snapshot: int(meta.Version), CreatedAt: s.now().UTC(), ServerID: s.cfg.ID}
	if err := json.NewEncoder(gz).Encode(hdr); err != nil {
		return fmt.Errorf("write archive header: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(gz, h), rc)
	if err != nil {
		return fmt.Errorf("write snapshot data: %w", err)
	}
	if n != meta.Size {
		return fmt.Errorf("snapshot is %d bytes, metadata says %d", n, meta.Size)
	}
	if _, err := fmt.Fprintf(gz, "\n%s\n", hex.EncodeToString(h.Sum(nil))); err != nil {
		return fmt.Errorf("write checksum: %w", err)
	}
	if err := gz.Close(); err != nil {
		return fmt.Errorf("finish archive: %w", err)
	}
	s.logger.Info("snapshot saved", "index", meta.Index, "bytes", meta.Size)
	return nil
}

// SnapshotRestore verifies an archive, then makes the whole cluster adopt
// its state (leader-only). The current Raft membership is kept.
func (s *Server) SnapshotRestore(ctx context.Context, r io.Reader) error {
	if !s.IsLeader() {
		return fmt.Errorf("%s: %w", s.cfg.ID, api.ErrNotLeader)
	}
	tmp, hdr, err := spoolArchive(r, s.cfg.DataDir)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersion(hdr.Snapshot), Index: hdr.Index, Term: hdr.Term, Size: hdr.Size}
	if err := s.raft.Restore(meta, tmp, 2*s.cfg.Raft.ApplyTimeout); err != nil {
		return s.raftErr("restore snapshot", err)
	}
	s.logger.Info("snapshot restored", "from_index", hdr.Index, "from_server", hdr.ServerID)
	return nil
}

// spoolArchive checks an archive and copies its snapshot data to a temp
// file in dir, positioned at the start.
func spoolArchive(r io.Reader, dir string) (*os.File, archiveHeader, error) {
	var hdr archiveHeader
	bad := func(format string, args ...any) (*os.File, archiveHeader, error) {
		return nil, hdr, fmt.Errorf("invalid snapshot archive: "+format+": %w", append(args, api.ErrBadRequest)...)
	}
	gz, err := gzip.NewReader(r)
	if err != nil {
		if tooLarge(err) {
			return nil, hdr, err
		}
		return bad("not gzip: %v", err)
	}
	br := bufio.NewReader(gz)
	line, err := br.ReadBytes('\n')
	if err != nil {
		return bad("no header: %v", err)
	}
	if err := json.Unmarshal(line, &hdr); err != nil {
		return bad("header: %v", err)
	}
	if hdr.Format != archiveFormat || hdr.Version != 1 {
		return bad("format %q version %d not supported", hdr.Format, hdr.Version)
	}
	if hdr.Size < 0 {
		return bad("negative size")
	}
	tmp, err := os.CreateTemp(dir, "restore-*.snap")
	if err != nil {
		return nil, hdr, fmt.Errorf("spool snapshot: %w", err)
	}
	fail := func(e error) (*os.File, archiveHeader, error) {
		tmp.Close()
		os.Remove(tmp.Name())
		return nil, hdr, e
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(br, hdr.Size))
	if err != nil {
		if tooLarge(err) {
			return fail(err)
		}
		return fail(fmt.Errorf("invalid snapshot archive: data: %v: %w", err, api.ErrBadRequest))
	}
	if n != hdr.Size {
		return fail(fmt.Errorf("invalid snapshot archive: truncated (%d of %d bytes): %w", n, hdr.Size, api.ErrBadRequest))
	}
	rest, err := io.ReadAll(io.LimitReader(br, 256))
	if err != nil {
		return fail(fmt.Errorf("invalid snapshot archive: checksum: %v: %w", err, api.ErrBadRequest))
	}
	if got, want := hex.EncodeToString(h.Sum(nil)), strings.TrimSpace(string(rest)); got != want {
		return fail(fmt.Errorf("invalid snapshot archive: checksum mismatch: %w", api.ErrBadRequest))
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return fail(fmt.Errorf("rewind spooled snapshot: %w", err))
	}
	return tmp, hdr, nil
}

// tooLarge reports whether err comes from the request body size limit,
// which the HTTP layer answers with 413.
func tooLarge(err error) bool {
	var mbe *http.MaxBytesError
	return errors.As(err, &mbe)
}
