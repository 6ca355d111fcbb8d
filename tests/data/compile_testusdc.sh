#!/usr/bin/env bash
# Regenerate tests/data/TestUSDC.json (and TryAggregate.json) from the .sol files beside this script with
# solc-js (the npm "solc" package).
# Needs node + npm (registry access) once; the tests themselves only read the committed .json files.
# solc-js is installed in a scratch directory OUTSIDE the repo (default /tmp/solc; override with SOLC_DIR).
set -euo pipefail

SOLC_VERSION="${SOLC_VERSION:-0.8.28}"   # must match the pragmas in the .sol files
SOLC_DIR="${SOLC_DIR:-/tmp/solc}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

mkdir -p "$SOLC_DIR"
if [ "$(node -p "try{require('$SOLC_DIR/node_modules/solc/package.json').version}catch(e){''}")" != "$SOLC_VERSION" ]; then
    (cd "$SOLC_DIR" && { [ -f package.json ] || npm init -y >/dev/null; } && npm install --silent "solc@$SOLC_VERSION")
fi

for NAME in TestUSDC TryAggregate; do
SOLC_DIR="$SOLC_DIR" NAME="$NAME" SRC="$HERE/$NAME.sol" OUT="$HERE/$NAME.json" node - <<'JS'
const fs = require("fs");
const solc = require(process.env.SOLC_DIR + "/node_modules/solc");
const input = {
  language: "Solidity",
  sources: { [process.env.NAME + ".sol"]: { content: fs.readFileSync(process.env.SRC, "utf8") } },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    metadata: { bytecodeHash: "none" },
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
  },
};
const out = JSON.parse(solc.compile(JSON.stringify(input)));
const errors = (out.errors || []).filter((e) => e.severity === "error");
for (const e of out.errors || []) console.error(e.formattedMessage);
if (errors.length) process.exit(1);
const c = out.contracts[process.env.NAME + ".sol"][process.env.NAME];
const result = {
  abi: c.abi,
  bytecode: "0x" + c.evm.bytecode.object,
  runtime: "0x" + c.evm.deployedBytecode.object,
  solc: solc.version(),
  settings: input.settings,
};
fs.writeFileSync(process.env.OUT, JSON.stringify(result, null, 1) + "\n");
console.log("wrote " + process.env.OUT + " (solc " + solc.version() + ", runtime " + (c.evm.deployedBytecode.object.length / 2) + " bytes)");
JS
done
