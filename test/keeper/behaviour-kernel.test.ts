/** The shared behaviour suite against the real kernel, each test in a fresh network namespace. */
import { kernelHost } from '../../src/netlink/host.js';
import { createNetns } from '../helpers/netns.js';
import { behaviourSuite } from './behaviour.js';

behaviourSuite('real kernel', () => {
  const ns = createNetns('behaviour');
  return { host: kernelHost(ns.path), close: () => ns.remove() };
});
