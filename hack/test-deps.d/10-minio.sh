#!/usr/bin/env bash
# Builds a real S3-compatible server (MinIO, AGPL-3.0) from the Go module proxy for tests that need S3
# (node agent model cache, checkpoint image store). It is only ever run as a separate process, never
# imported. Idempotent: the binary is cached per pinned version under .local/tools and linked to
# .local/bin/minio; a second run is a no-op.
set -euo pipefail

MINIO_VERSION="${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TOOLDIR="${ROOT}/.local/tools/minio-${MINIO_VERSION}"
BIN="${ROOT}/.local/bin"

if [[ ! -x "${TOOLDIR}/minio" ]]; then
  echo "10-minio: building github.com/minio/minio@${MINIO_VERSION} (a few minutes cold)"
  mkdir -p "${TOOLDIR}.tmp"
  # GOFLAGS is cleared so a -mod=mod from the caller cannot leak into the install of another module.
  GOFLAGS= GOBIN="${TOOLDIR}.tmp" go install "github.com/minio/minio@${MINIO_VERSION}"
  rm -rf "${TOOLDIR}"
  mv "${TOOLDIR}.tmp" "${TOOLDIR}"
fi
mkdir -p "${BIN}"
ln -sfn "${TOOLDIR}/minio" "${BIN}/minio"
echo "10-minio: ${BIN}/minio -> ${TOOLDIR}/minio"
