package warm

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrOverBudget is returned when locking a file would exceed the lock budget.
var ErrOverBudget = errors.New("mlock budget exceeded")

// Locker keeps files resident with mlock, never locking more than Budget bytes in total. Each locked
// file holds a read-only shared mapping until Unlock.
type Locker struct {
	// Budget is the most bytes locked at once.
	Budget int64

	mu     sync.Mutex
	maps   map[string][]byte // path -> locked mapping
	locked int64
}

// Lock maps and mlocks path. Locking an already locked path is a no-op.
func (l *Locker) Lock(path string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.maps == nil {
		l.maps = map[string][]byte{}
	}
	if _, ok := l.maps[path]; ok {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if l.locked+st.Size() > l.Budget {
		return fmt.Errorf("lock %s (%d bytes, %d of %d locked): %w", path, st.Size(), l.locked, l.Budget, ErrOverBudget)
	}
	if st.Size() == 0 {
		l.maps[path] = nil
		return nil
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("lock %s: mmap: %w", path, err)
	}
	if err := unix.Mlock(m); err != nil {
		_ = unix.Munmap(m)
		return fmt.Errorf("lock %s: mlock: %w", path, err)
	}
	l.maps[path] = m
	l.locked += st.Size()
	return nil
}

// Unlock releases path's lock and mapping, if any.
func (l *Locker) Unlock(path string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	m, ok := l.maps[path]
	if !ok {
		return nil
	}
	delete(l.maps, path)
	l.locked -= int64(len(m))
	if m == nil {
		return nil
	}
	if err := unix.Munmap(m); err != nil { // munmap also unlocks
		return fmt.Errorf("unlock %s: %w", path, err)
	}
	return nil
}

// Locked returns the bytes locked now.
func (l *Locker) Locked() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.locked
}

// IsLocked reports whether path is locked.
func (l *Locker) IsLocked(path string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.maps[path]
	return ok
}

// Paths returns the locked paths.
func (l *Locker) Paths() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.maps))
	for p := range l.maps {
		out = append(out, p)
	}
	return out
}
