package netns

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openTUN creates the TUN device name (IFF_TUN|IFF_NO_PI: each read and
// write is one bare IP packet, checksums complete, since without
// IFF_VNET_HDR the kernel offloads nothing to it) and returns its
// descriptor as a non-blocking file, so that Close wakes a blocked Read.
// The device lives as long as the descriptor, in whichever namespace it
// is moved to.
func openTUN(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("netns: opening /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netns: tun %s: %w", name, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netns: TUNSETIFF %s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}
