/**
 * bin/nfkeeper.js for the tests, run through tsx: the same main() and the same
 * exit, on the sources rather than on a build in dist/ that could be stale.
 */
import { main } from '../../src/cli.js';

process.exit(await main(process.argv));
