#!/usr/bin/env bash
# Makes throwaway TLS material for the TLS tests, with openssl, in DIR:
#   ca.crt ca.key          the test CA
#   node.crt node.key      signed by ca: SAN IP:127.0.0.1, DNS:localhost and
#                          DNS:pdserve-internal, usable as server and client
#                          certificate (router, prefill, decode share it)
#   other-ca.crt           an unrelated CA
#   rogue.crt rogue.key    signed by other-ca, the same SANs (a worker from
#                          another deployment)
#   notpem.txt             a file that is not PEM
# Usage: make_test_certs.sh DIR
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
ext=san.ext
cat >"$ext" <<'X'
subjectAltName = IP:127.0.0.1, DNS:localhost, DNS:pdserve-internal
extendedKeyUsage = serverAuth, clientAuth
basicConstraints = CA:FALSE
keyUsage = digitalSignature, keyEncipherment
X
ca() {  # ca NAME
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.crt" -days 2 -subj "/CN=$1 test CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
}
leaf() {  # leaf NAME CA
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA "$2.crt" -CAkey "$2.key" -CAcreateserial -out "$1.crt" -days 2 \
    -extfile "$ext" 2>/dev/null
  rm -f "$1.csr"
}
ca ca
ca other-ca
leaf node ca
leaf rogue other-ca
echo "not a certificate" >notpem.txt
openssl verify -CAfile ca.crt node.crt >/dev/null
openssl verify -CAfile other-ca.crt rogue.crt >/dev/null
