# Sourced by the scripts that install a C/C++ library from PyPI's packaged builds (scripts/mkl.sh,
# scripts/cudnn-frontend.sh). pinned_wheel REQUIREMENT SHA256 DIR [pip download options...]
# downloads the one wheel REQUIREMENT names ("mkl==2026.2.0"), its hash checked, into DIR,
# through a throwaway environment for pip (Debian's python3 may have none).
pinned_wheel() {
  local requirement=$1 sha256=$2 dir=$3
  shift 3
  /usr/bin/python3 -m venv "$dir/venv"
  echo "$requirement --hash=sha256:$sha256" > "$dir/requirements.txt"
  "$dir/venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
    "$@" -r "$dir/requirements.txt" -d "$dir/wheel"
}
