package outbox

import (
	"database/sql"
	"sync"
	"testing"
)

// Instances starting at once on a new database all get their tables:
// PostgreSQL fails all but one of simultaneous CREATE TABLE IF NOT EXISTS
// of a table, and New and Idempotent try again.
func TestConcurrentFirstStarts(t *testing.T) {
	const instances = 8
	forEachDialect(t, func(t *testing.T, db *testDB) {
		pools := make([]*sql.DB, instances)
		for i := range pools {
			pools[i] = db.open(t)
		}
		errs := make([]error, instances)
		var wg sync.WaitGroup
		for i, pool := range pools {
			wg.Go(func() {
				ob, err := New(pool, newRecorder(nil), Config{Dialect: db.d})
				if err == nil {
					ob.Close()
					_, err = Idempotent(pool, db.addToOrder, IdempotentConfig{Dialect: db.d})
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("instance %d: %v", i, err)
			}
		}
	})
}
