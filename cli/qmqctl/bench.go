package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:  "bench",
		Usage: "measure produce and consume throughput and latency",
		Subcommands: []*cli.Command{
			{Name: "produce", Usage: "send messages as fast as the window allows", Action: func(*cli.Context) error { return fmt.Errorf("not built yet") }},
			{Name: "consume", Usage: "drain messages with acks", Action: func(*cli.Context) error { return fmt.Errorf("not built yet") }},
		},
	}
}
