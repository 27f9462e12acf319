package http

import "sync"

// waitsPerUser bounds a user's ?wait=true writes waiting at once on one process; a further
// one is answered 202 without waiting. A wait polls PostgreSQL until its write is applied
// (about 55 reads in a 5 s timeout), and a retry is not rate limited (it adds nothing to the
// backlog): without the bound, a player's retries of one write, sent while the pipeline is
// behind, would each poll PostgreSQL for the whole timeout.
const waitsPerUser = 4

// waitSlots counts the waits in flight per user.
type waitSlots struct {
	mu sync.Mutex
	n  map[string]int
}

// take reserves one of the user's waits: false when the user has waitsPerUser already.
func (w *waitSlots) take(userID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n[userID] >= waitsPerUser {
		return false
	}
	if w.n == nil {
		w.n = make(map[string]int)
	}
	w.n[userID]++
	return true
}

// give returns a wait take reserved.
func (w *waitSlots) give(userID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n[userID] <= 1 {
		delete(w.n, userID)
		return
	}
	w.n[userID]--
}
