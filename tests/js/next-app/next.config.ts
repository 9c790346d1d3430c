// Only this repository's copy needs it: tests/js beside it has a lockfile of its own, so Next.js would
// otherwise guess tests/js as the workspace root.
import type { NextConfig } from 'next';

const config: NextConfig = { turbopack: { root: __dirname } };
export default config;
