package pkgs

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The cache: verified wheels by path relative to the cache directory, bounded in bytes
// and files, least recently used first out; a file a load in flight needs is pinned.

type cacheEntry struct {
	size int64
	used time.Time
	pins int // loads in flight that need the file: it is not evicted
}

// scanCache learns what a previous run of the server left in the cache, oldest use
// first by modification time (a use touches the file).
func (f *Fetcher) scanCache() {
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	_ = filepath.WalkDir(f.dir, func(p string, d os.DirEntry, err error) error {
		rel, _ := filepath.Rel(f.dir, p)
		if d != nil && d.IsDir() && rel == sessionsDir {
			return filepath.SkipDir // session views: links to cached files
		}
		if err != nil || d.IsDir() {
			return nil
		}
		if !Cacheable(rel) {
			return nil
		}
		if info, err := d.Info(); err == nil {
			f.entries[rel] = &cacheEntry{size: info.Size(), used: info.ModTime()}
			f.total += info.Size()
		}
		return nil
	})
	f.evictLocked(0, 0)
}

// Cacheable tells a cached file from the lock file and files being written.
func Cacheable(rel string) bool {
	base := filepath.Base(rel)
	return base != "pyodide-lock.json" && !strings.HasPrefix(base, ".")
}

// use marks a cached file as needed by a load about to happen: it is not evicted until
// release is called. It reports false when the file is not in the cache.
func (f *Fetcher) use(rel string) (int64, bool) {
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	e := f.entries[rel]
	if e == nil {
		if !fileExists(filepath.Join(f.dir, rel)) {
			return 0, false
		}
		// Written by another server sharing the directory.
		info, err := os.Stat(filepath.Join(f.dir, rel))
		if err != nil {
			return 0, false
		}
		e = &cacheEntry{size: info.Size()}
		f.entries[rel] = e
		f.total += e.size
	}
	e.pins++
	e.used = time.Now()
	_ = os.Chtimes(filepath.Join(f.dir, rel), time.Time{}, e.used)
	return e.size, true
}

// release unpins files taken with use or admit.
func (f *Fetcher) release(rels []string) {
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	for _, rel := range rels {
		if e := f.entries[rel]; e != nil && e.pins > 0 {
			e.pins--
		}
	}
	f.evictLocked(0, 0)
}

// admit writes a verified file into the cache, pinned for the load that asked for it.
// It makes room by evicting what no load needs; when loads in flight hold the rest, it
// refuses rather than pass the cache's bound.
func (f *Fetcher) admit(rel string, data []byte) error {
	size := int64(len(data))
	f.cacheMu.Lock()
	if old := f.entries[rel]; old != nil && old.pins == 0 {
		f.total -= old.size
		delete(f.entries, rel)
	}
	f.evictLocked(size, 1)
	switch {
	case f.total+size > f.max:
		held := f.total
		f.cacheMu.Unlock()
		return boundErrorf("%s refused: the package cache is full (loads in flight hold %d MiB of its %d MiB; PackageCacheMaxBytes, SANDCHAT_SANDBOX_PACKAGE_CACHE_MAX)",
			filepath.Base(rel), held>>20, f.max>>20)
	case len(f.entries)+1 > f.maxFile:
		f.cacheMu.Unlock()
		return boundErrorf("%s refused: the package cache is full (loads in flight hold its %d files; PackageCacheMaxFiles, SANDCHAT_SANDBOX_PACKAGE_CACHE_MAX_FILES)",
			filepath.Base(rel), f.maxFile)
	}
	// Counted (and pinned) before it is written: a concurrent admit cannot take the room.
	e := f.entries[rel]
	if e == nil {
		e = &cacheEntry{size: size}
		f.entries[rel] = e
		f.total += size
	}
	e.pins++
	e.used = time.Now()
	f.cacheMu.Unlock()
	dir := filepath.Join(f.dir, filepath.Dir(rel))
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		_ = os.Chmod(dir, 0o755)
		err = WriteAtomic(dir, filepath.Base(rel), data)
	}
	if err != nil {
		f.release([]string{rel})
	}
	return err
}

// evictLocked deletes the least recently used unpinned files until the cache has room
// for need more bytes in files more files. Files a load in flight needs stay.
func (f *Fetcher) evictLocked(need int64, files int) {
	full := func() bool { return f.total+need > f.max || len(f.entries)+files > f.maxFile }
	if !full() {
		return
	}
	var free []string
	for rel, e := range f.entries {
		if e.pins == 0 {
			free = append(free, rel)
		}
	}
	sort.Slice(free, func(i, j int) bool { return f.entries[free[i]].used.Before(f.entries[free[j]].used) })
	for _, rel := range free {
		if !full() {
			return
		}
		p := filepath.Join(f.dir, rel)
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			continue
		}
		if d := filepath.Dir(rel); d != "." {
			_ = os.Remove(filepath.Join(f.dir, d)) // a pip wheel's own directory, once empty
		}
		f.total -= f.entries[rel].size
		delete(f.entries, rel)
	}
}

// CacheBytes is what the cache holds, by the fetcher's account.
func (f *Fetcher) CacheBytes() int64 {
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	return f.total
}

// ForgetCache empties the package cache, as a new server with an empty disk would have
// it (benchmarks of a first fetch).
func (f *Fetcher) ForgetCache() {
	f.cacheMu.Lock()
	defer f.cacheMu.Unlock()
	for rel := range f.entries {
		_ = os.Remove(filepath.Join(f.dir, rel))
	}
	clear(f.entries)
	f.total = 0
}
