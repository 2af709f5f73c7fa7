/** The rule language: nft rule text to the expression IR and back, and rule comparison. */
export { RuleSyntaxError } from '../base/errors.js';
export { compileRule, compiledRule, compiledSetResolver, queueRule, type CompileContext, type CompiledRule } from './compile.js';
export { renderRule, interfaceTable, type InterfaceResolver, type RenderOptions, type SetResolver } from './render.js';
export { ruleKey, rulesEqual, setContentKey, setResolver } from './compare.js';
export { commentOf, commentUserdata, decodeXtComment, xtComments, COMMENT_MAX } from './udata.js';
export { parseRule } from './parser.js';
export { checkRulePlacement, JumpGraph, NFT_JUMP_STACK_SIZE } from './placement.js';
export { DEFAULT_TAG, ID_PATTERN, tagMatcher, type TagMatcher } from './tags.js';
