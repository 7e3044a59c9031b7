package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/server"
)

// initialVersionFlag sets the active version Number a broker group this
// node bootstraps starts at: the build's newest by default; 1 for a group
// whose nodes may run the release before version gates (docs/upgrading.md).
func initialVersionFlag() cli.Flag {
	return &cli.UintFlag{Name: "initial-version", Value: uint(version.Max),
		Usage: fmt.Sprintf("with --bootstrap, start the new broker group at active version `N` (%s; 1: nodes of the release "+
			"before version gates, eb696dd, may join it, until qmqctl upgrade finalize raises it); a group that has data keeps its own", version.Build())}
}

// initialVersionSettings applies --initial-version to cfg.
func initialVersionSettings(c *cli.Context, cfg *server.Config) error {
	n := c.Uint("initial-version")
	if n > uint(version.Max) || !version.Supports(version.Number(n)) {
		return fmt.Errorf("%w --initial-version %d: %s", errInvalidFlag, n, version.Build())
	}
	cfg.InitialVersion = version.Number(n)
	return nil
}
