// Command image assembles qmqd's container image without a container
// engine: qmqd and qmqctl built static, in one layer on an empty base with
// /etc/passwd and /etc/group for the user qmq, the build machine's CA
// certificates and a data directory owned by qmq, and the configuration of
// config.go, which deploy/Dockerfile repeats (its test checks they agree).
// It writes a tarball that `docker load` (or podman, or crane) takes.
//
// From the repository's root (`make image` runs it):
//
//	go run ./deploy/image --out bin/qmq-image.tar [--tag qmq:devel] [--arch amd64] [--version V] [--revision R]
//
// --bin DIR takes qmqd and qmqctl already built in DIR instead of building
// them; they must be static Linux binaries of the image's architecture.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
)

func main() {
	var o options
	flag.StringVar(&o.out, "out", "bin/qmq-image.tar", "write the image, as a tarball `docker load` takes, to `FILE`")
	flag.StringVar(&o.tag, "tag", "", "the image's `NAME:TAG` in the tarball (default qmq:VERSION)")
	flag.StringVar(&o.arch, "arch", runtime.GOARCH, "build for `GOARCH` (linux only)")
	flag.StringVar(&o.version, "version", defaultVersion, "the org.opencontainers.image.version label")
	flag.StringVar(&o.revision, "revision", defaultRevision, "the org.opencontainers.image.revision label (a commit)")
	flag.StringVar(&o.bin, "bin", "", "take qmqd and qmqctl from `DIR` instead of building them")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "image: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	if o.tag == "" {
		o.tag = "qmq:" + o.version
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "image: wrote %s (%s): docker load -i %s\n", o.out, o.tag, o.out)
}

// options are the builder's flags.
type options struct {
	out, tag, arch, version, revision, bin string
}

// run builds the image of o and writes it to o.out.
func run(o options) error {
	bin := o.bin
	if bin == "" {
		tmp, err := os.MkdirTemp("", "qmq-image-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if err := buildBinaries(tmp, o.arch); err != nil {
			return err
		}
		bin = tmp
	}
	img, err := assemble(bin, o.arch, o.version, o.revision)
	if err != nil {
		return err
	}
	return write(img, o.tag, o.out)
}
