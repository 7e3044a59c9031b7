package server

import "context"

// requestApp returns the application a request is made for: the one the
// request claims.
func requestApp(ctx context.Context, claimed string) string { return claimed }
