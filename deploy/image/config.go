package main

// The image's configuration, defined here once: the builder writes it into
// the image, and the test checks that deploy/Dockerfile says the same
// (its USER, ENTRYPOINT, EXPOSE, VOLUME, WORKDIR, ENV, STOPSIGNAL and LABEL
// lines), so that the two builds cannot drift apart.

// The user qmqd runs as: the one entry of rootfs/etc/passwd besides root,
// numeric so that a runtime can tell it is not root without reading the
// image's /etc/passwd (Kubernetes' runAsNonRoot needs a number).
const (
	userName = "qmq"
	uid      = 10001
	gid      = 10001
)

// The image's paths: the binaries, and the data directory, owned by the
// user and a volume.
const (
	binDir  = "/usr/local/bin"
	dataDir = "/var/lib/qmq"
	caFile  = "/etc/ssl/certs/ca-certificates.crt"
)

// ports are the ports the image's nodes listen on by convention
// (docs/deployment.md): qmqd meta and broker have no default addresses, so
// these are the ones the examples, the systemd units and the image agree on;
// the broker's and the metaserver's client and Raft ports are qmqd dev's.
var ports = []string{
	"6222/tcp", // broker: clients (--listen)
	"6223/tcp", // broker: Raft (--raft)
	"6224/tcp", // metaserver: clients (--listen)
	"6225/tcp", // metaserver: Raft (--raft)
	"6280/tcp", // broker: admin HTTP (--http: /status, /metrics)
	"6281/tcp", // metaserver: admin HTTP (--http)
}

// entrypoint runs qmqd; the container's command (meta, broker, dev and
// their flags) follows it.
var entrypoint = []string{binDir + "/qmqd"}

// env is the environment of the image: qmqctl is on the PATH for `docker
// exec`, and nothing else is set (qmqd's QMQ_* variables are the
// deployment's to give).
var env = []string{"PATH=" + binDir}

const stopSignal = "SIGTERM"

// labels returns the image's OCI annotations for a build of version at
// revision (the Dockerfile's VERSION and REVISION build arguments).
func labels(version, revision string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":         "qmq",
		"org.opencontainers.image.description":   "QMQ on Raft: qmqd (metaserver, broker and dev nodes) and qmqctl",
		"org.opencontainers.image.source":        "https://github.com/qmqgo/qmq",
		"org.opencontainers.image.url":           "https://github.com/qmqgo/qmq",
		"org.opencontainers.image.documentation": "https://github.com/qmqgo/qmq/blob/main/docs/deployment.md",
		"org.opencontainers.image.licenses":      "Apache-2.0",
		"org.opencontainers.image.vendor":        "qmqgo",
		"org.opencontainers.image.version":       version,
		"org.opencontainers.image.revision":      revision,
	}
}

// Defaults of the version and revision labels, the Dockerfile's ARG
// defaults too.
const (
	defaultVersion  = "devel"
	defaultRevision = "unknown"
)

// goBuild is the build of the image's binaries, as the Dockerfile runs it:
// static (no cgo), without the build machine's paths, stripped.
var goBuild = []string{"build", "-trimpath", "-ldflags=-s -w"}

// goBuildEnv is the environment goBuild runs in, besides GOOS and GOARCH.
var goBuildEnv = []string{"CGO_ENABLED=0"}

// binaries are the commands the image holds, as packages of the module.
var binaries = []string{"./cli/qmqd", "./cli/qmqctl"}
