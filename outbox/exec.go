package outbox

import (
	"context"
	"database/sql"
)

// execer is what runs a statement: a *sql.DB or a *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// execCount runs a statement and returns how many rows it affected: the
// answer of every insert that ignores a conflict and of the lease UPDATE.
func execCount(ctx context.Context, e execer, query string, args ...any) (int64, error) {
	res, err := e.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
