/** The shared behaviour suite against the fake kernel: holds test/helpers/fake-kernel.ts to what the kernel does. */
import { FakeKernel } from '../helpers/fake-kernel.js';
import { behaviourSuite } from './behaviour.js';

behaviourSuite('fake kernel', () => ({ host: new FakeKernel(), close: () => undefined }));
