package warm

// Candidate is a cached file considered by EnforceMemoryBudget.
type Candidate struct {
	// Path is the file.
	Path string
	// Pinned files (in use by a running pod) are never dropped.
	Pinned bool
}

// EnforceMemoryBudget drops files from the page cache, least recently used first (the order of lru),
// until the resident bytes of all candidates are at most budget. Pinned and mlocked files are kept.
// It returns the dropped paths and the resident bytes afterwards.
func EnforceMemoryBudget(lru []Candidate, budget int64, locker *Locker) (dropped []string, resident int64, err error) {
	res := make([]int64, len(lru))
	for i, c := range lru {
		r, _, err := Resident(c.Path)
		if err != nil {
			return nil, 0, err
		}
		res[i] = r
		resident += r
	}
	for i, c := range lru {
		if resident <= budget {
			break
		}
		if c.Pinned || res[i] == 0 || (locker != nil && locker.IsLocked(c.Path)) {
			continue
		}
		if err := Drop(c.Path); err != nil {
			return dropped, resident, err
		}
		r, _, err := Resident(c.Path)
		if err != nil {
			return dropped, resident, err
		}
		resident -= res[i] - r
		dropped = append(dropped, c.Path)
	}
	return dropped, resident, nil
}
