package main

import "fmt"

// plural writes a count with its noun: "1 message", "2 messages",
// "0 messages".
func plural[N ~int | ~int32 | ~int64 | ~uint32 | ~uint64](n N, noun string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", noun)
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
