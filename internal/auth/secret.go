package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"time"
)

const (
	saltLen    = 16
	hashLen    = sha256.Size
	secretBits = 256
	// secretPrefix makes a secret recognisable in a configuration file
	// or a leaked log.
	secretPrefix = "qmqs_"
	// SecretLen is the length of a secret NewSecret makes: the prefix
	// and 32 bytes in unpadded base64.
	SecretLen = len(secretPrefix) + 43
)

// NewSecret makes a secret (returned once, to be given to the
// application) and the record that verifies it.
func NewSecret() (string, Secret, error) {
	raw := make([]byte, secretBits/8)
	salt := make([]byte, saltLen)
	if _, err := rand.Read(raw); err != nil {
		return "", Secret{}, fmt.Errorf("auth: new secret: %w", err)
	}
	if _, err := rand.Read(salt); err != nil {
		return "", Secret{}, fmt.Errorf("auth: new secret: %w", err)
	}
	secret := secretPrefix + base64.RawURLEncoding.EncodeToString(raw)
	return secret, Secret{Salt: hex.EncodeToString(salt), Hash: hex.EncodeToString(hashSecret(salt, secret))}, nil
}

func hashSecret(salt []byte, secret string) []byte {
	h := sha256.New()
	h.Write(salt)
	h.Write([]byte(secret))
	return h.Sum(nil)
}

// Matches reports whether secret is the one s verifies and s has not
// expired at now. It takes the same time whatever part of the secret is
// wrong.
func (s Secret) Matches(secret string, now time.Time) bool {
	if s.Expires != 0 && now.UnixMilli() >= s.Expires {
		return false
	}
	salt, err1 := hex.DecodeString(s.Salt)
	want, err2 := hex.DecodeString(s.Hash)
	if err1 != nil || err2 != nil {
		return false
	}
	return subtle.ConstantTimeCompare(hashSecret(salt, secret), want) == 1
}
