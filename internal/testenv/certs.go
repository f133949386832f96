package testenv

import (
	"crypto/ecdsa"
	"crypto/x509"
	"path/filepath"
)

// TestCA is a throwaway certificate authority for TLS tests; File is its certificate (PEM).
type TestCA struct {
	File string
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
}

// NewTestCA creates a CA named name and writes its certificate into dir.
func NewTestCA(dir, name string) (*TestCA, error) {
	return writeCA(filepath.Join(dir, sanitizeFileName(name)+".pem"), name)
}

// writeCA creates a CA named name and writes its certificate to file.
func writeCA(file, name string) (*TestCA, error) {
	key, cert, der, err := newCA(name)
	if err != nil {
		return nil, err
	}
	if err := writePEM(file, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return &TestCA{File: file, key: key, cert: cert}, nil
}

// Issue writes a certificate for names (a server's, or with client a client's) signed by the CA
// and its key into dir as <base>.pem and <base>-key.pem, and returns their paths.
func (ca *TestCA) Issue(dir, base string, names []string, client bool) (certFile, keyFile string, err error) {
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	cn := "server"
	if len(names) > 0 {
		cn = names[0]
	}
	if client {
		usage, cn = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, base
	}
	return ca.issue(dir, base, cn, usage, names)
}

// issue writes a certificate for cn and names with usage, signed by the CA, and its key into
// dir as <base>.pem and <base>-key.pem.
func (ca *TestCA) issue(dir, base, cn string, usage []x509.ExtKeyUsage, names []string) (certFile, keyFile string, err error) {
	key, der, err := newLeaf(ca.key, ca.cert, cn, usage, names, nil)
	if err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, base+".pem"), filepath.Join(dir, base+"-key.pem")
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	return certFile, keyFile, writePEM(keyFile, "PRIVATE KEY", keyDER)
}

func sanitizeFileName(s string) string {
	out := []byte(s)
	for i, c := range out {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			out[i] = '_'
		}
	}
	return string(out)
}
