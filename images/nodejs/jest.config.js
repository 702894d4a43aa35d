// Jest for the `jest` language: the test file is /sandbox/main.test.ts (or .js), TypeScript
// through Babel as in SandboxFusion; packages come from the image, not from /sandbox.
const modules = '/usr/local/lib/node_modules';
module.exports = {
  rootDir: process.cwd(),
  testMatch: ['**/*.test.[jt]s?(x)'],
  modulePaths: [modules],
  transform: {
    '\\.[jt]sx?$': [`${modules}/babel-jest`, {
      presets: [[`${modules}/@babel/preset-env`, { targets: { node: 'current' } }],
                `${modules}/@babel/preset-typescript`],
      babelrc: false, configFile: false,
    }],
  },
  cacheDirectory: '/tmp/jest-cache',
  watchman: false,
  maxWorkers: 1,
};
