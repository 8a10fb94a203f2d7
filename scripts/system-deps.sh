#!/usr/bin/env bash
# Checks what the machine must provide (Java 17 and its compiler, Maven, PostgreSQL and Prometheus from Debian, and
# any package named as an argument) and installs what is missing when apt-get is
# available and we may use it.
set -euo pipefail

need=("$@")  # further packages a target asks for (e.g. chromium for the browser tests)
java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ]; then
  need+=(openjdk-17-jre-headless)
fi
# javac and Maven: the project's Java (java/) is built and tested as a Maven module against pyspark's jars.
command -v javac >/dev/null 2>&1 || need+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
# PostgreSQL's server (initdb, pg_ctl): the tests, `make demo-cdc` and the cluster demo start throwaway servers.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || need+=(postgresql)
# Prometheus and promtool: the metrics and alert-rule tests run the real ones.
command -v promtool >/dev/null 2>&1 || need+=(prometheus)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo -n"
if command -v apt-get >/dev/null 2>&1 && { [ -z "$sudo" ] || sudo -n true 2>/dev/null; }; then
  echo "installing system packages: ${need[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
else
  echo "missing system packages: ${need[*]}" >&2
  echo "install them (Debian/Ubuntu: apt-get install ${need[*]}) and run make again" >&2
  exit 1
fi
