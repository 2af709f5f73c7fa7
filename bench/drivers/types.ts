/** The interface every benchmark driver implements over the same desired set. */

export interface Driver {
  /** Short name used in tables and the SVG legend. */
  readonly name: string;
  /** One line: what the driver does per check and per repair. */
  readonly describe: string;
  /** Programs forked per steady-state check (0 for native). */
  readonly forksPerCheck: number;
  /** Is the desired set installed, complete and in order? */
  check(): Promise<boolean>;
  /** Installs the desired set again, atomically, in order. */
  repair(): Promise<void>;
  /** Removes one owned rule with the driver's own tool (for the self-test: check must then say false). */
  damage(): Promise<void>;
  close(): void;
}
