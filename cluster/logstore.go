package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"herd/config"
)

// logStore is a replica's Raft log together with its stable store (the
// current term and the last vote), kept in one place on disk.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// logStorePaths are where each kind of log store lives in a replica's
// raft directory.
var logStorePaths = map[string]string{
	config.LogStoreWAL:    "wal",     // a directory of segment files and a small meta database
	config.LogStoreBoltDB: "raft.db", // one bbolt file
}

// openLogStore opens the log store of the configured kind under dir (the
// replica's raft directory). A replica whose log is kept by the other
// kind has it copied into the configured one first, entries and stable
// keys alike, so that a change of log_store keeps every entry the replica
// acknowledged. The copy is built under a temporary name and renamed into
// place only once complete and synced; the old store is removed after
// that, so a crash at any point leaves either the old store alone or the
// new one complete (the old one then removed at the next start).
func openLogStore(dir, kind string, logger hclog.Logger) (logStore, error) {
	target, ok := logStorePaths[kind]
	if !ok {
		return nil, fmt.Errorf("unknown raft log store %q", kind)
	}
	target = filepath.Join(dir, target)
	other := otherLogStore(kind)
	otherPath := filepath.Join(dir, logStorePaths[other])
	haveTarget, err := exists(target)
	if err != nil {
		return nil, err
	}
	haveOther, err := exists(otherPath)
	if err != nil {
		return nil, err
	}
	if haveTarget && haveOther {
		// A migration renamed its copy into place, then stopped before it
		// removed what it copied from.
		logger.Warn("removing the raft log store already copied into the configured one", "removed", otherPath, "kept", target)
		if err := removeAndSync(otherPath); err != nil {
			return nil, err
		}
	}
	if !haveTarget && haveOther {
		if err := migrateLogStore(dir, other, kind, logger); err != nil {
			return nil, err
		}
	}
	return openLogStoreAt(target, kind, logger)
}

// otherLogStore is the kind a replica configured for kind may find on disk.
func otherLogStore(kind string) string {
	if kind == config.LogStoreWAL {
		return config.LogStoreBoltDB
	}
	return config.LogStoreWAL
}

func openLogStoreAt(path, kind string, logger hclog.Logger) (logStore, error) {
	switch kind {
	case config.LogStoreWAL:
		if err := os.MkdirAll(path, 0o750); err != nil {
			return nil, fmt.Errorf("create raft log directory: %w", err)
		}
		return openWAL(path, logger)
	case config.LogStoreBoltDB:
		b, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: raftLogBoltOptions()})
		if err != nil {
			return nil, fmt.Errorf("open raft log %s: %w", path, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("unknown raft log store %q", kind)
}

// raftLogBoltOptions are how bbolt keeps the Raft log file.
//
// NoFreelistSync: the list of free pages is not written with every
// commit. A log whose head is deleted after every snapshot frees
// thousands of pages, and bbolt would otherwise rewrite their list, pages
// of it, on every append; instead it is rebuilt from the file at open (a
// scan of a file of a few tens of MiB). Files written either way open
// either way, so an older build reads this one's log.
//
// FreelistMapType: the free pages are kept in a map by run length, so an
// append finds room without sorting the list of every free page.
func raftLogBoltOptions() *bbolt.Options {
	return &bbolt.Options{NoFreelistSync: true, FreelistType: bbolt.FreelistMapType}
}

// migrateLogStore copies the store of kind from into a new store of kind
// to, in the same raft directory.
func migrateLogStore(dir, from, to string, logger hclog.Logger) error {
	src := filepath.Join(dir, logStorePaths[from])
	dst := filepath.Join(dir, logStorePaths[to])
	tmp := dst + ".migrating"
	logger.Info("copying the raft log into the configured log store", "from", src, "to", dst)
	// A copy left by an earlier attempt is incomplete by construction.
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("remove an unfinished copy of the raft log: %w", err)
	}
	n, err := copyLogStoreAt(tmp, to, src, from, logger)
	if err != nil {
		return fmt.Errorf("copy the raft log from %s to %s: %w", logStorePaths[from], logStorePaths[to], err)
	}
	if err := syncTree(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("move the copied raft log into place: %w", err)
	}
	if err := syncPath(dir); err != nil {
		return err
	}
	if err := removeAndSync(src); err != nil {
		return err
	}
	logger.Info("raft log copied", "entries", n, "into", dst)
	return nil
}

// copyLogStoreAt copies the store of kind from at src into a new store
// of kind to at dst, and closes both.
func copyLogStoreAt(dst, to, src, from string, logger hclog.Logger) (n int, err error) {
	in, err := openLogStoreAt(src, from, logger)
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := in.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", src, cerr)
		}
	}()
	out, err := openLogStoreAt(dst, to, logger)
	if err != nil {
		return 0, err
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", dst, cerr)
		}
	}()
	return copyLogStore(out, in)
}

// raftStableKeys are every key hashicorp/raft keeps in its stable store,
// with whether it holds a number (SetUint64: each store encodes numbers
// in its own byte order, so they are copied as numbers).
var raftStableKeys = []struct {
	key    string
	number bool
}{{"CurrentTerm", true}, {"LastVoteTerm", true}, {"LastVoteCand", false}}

// copyBatchBytes bounds the entries copied in one append.
const copyBatchBytes = 4 << 20

// copyLogStore copies every entry and stable key of src into the empty
// dst and returns how many entries it copied.
func copyLogStore(dst, src logStore) (int, error) {
	for _, k := range raftStableKeys {
		if k.number {
			v, err := src.GetUint64([]byte(k.key))
			if err != nil && !notFound(err) {
				return 0, fmt.Errorf("read %s: %w", k.key, err)
			}
			if err == nil && v != 0 {
				if err := dst.SetUint64([]byte(k.key), v); err != nil {
					return 0, fmt.Errorf("write %s: %w", k.key, err)
				}
			}
			continue
		}
		v, err := src.Get([]byte(k.key))
		if err != nil && !notFound(err) {
			return 0, fmt.Errorf("read %s: %w", k.key, err)
		}
		if err == nil && len(v) > 0 {
			if err := dst.Set([]byte(k.key), v); err != nil {
				return 0, fmt.Errorf("write %s: %w", k.key, err)
			}
		}
	}
	first, err := src.FirstIndex()
	if err != nil {
		return 0, fmt.Errorf("first index: %w", err)
	}
	last, err := src.LastIndex()
	if err != nil {
		return 0, fmt.Errorf("last index: %w", err)
	}
	if last == 0 {
		return 0, nil
	}
	var (
		batch []*raft.Log
		size  int
		n     int
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := dst.StoreLogs(batch); err != nil {
			return fmt.Errorf("store entries %d to %d: %w", batch[0].Index, batch[len(batch)-1].Index, err)
		}
		n += len(batch)
		batch, size = batch[:0], 0
		return nil
	}
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		if err := src.GetLog(i, l); err != nil {
			return n, fmt.Errorf("read entry %d: %w", i, err)
		}
		batch = append(batch, l)
		size += len(l.Data) + len(l.Extensions)
		if size >= copyBatchBytes {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	return n, flush()
}

// notFound tells a stable store's answer for a key never set: raft-boltdb
// answers an error saying so, raft-wal an empty value.
func notFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), "not found")
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return false, fmt.Errorf("look for %s: %w", path, err)
}

// syncPath flushes a file or directory (its entries) to disk.
func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// syncTree flushes every file and directory under root (root included).
func syncTree(root string) error {
	return filepath.WalkDir(root, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("sync %s: %w", path, err)
		}
		return syncPath(path)
	})
}

// removeAndSync removes path (a file or a directory tree) and syncs the
// directory that held it.
func removeAndSync(path string) error {
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return syncPath(filepath.Dir(path))
}
