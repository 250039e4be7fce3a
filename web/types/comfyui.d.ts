// Types of the modules ComfyUI's frontend serves at /scripts/*.js (shims over window.comfyAPI),
// from the published typings pinned in package.json. Used only by `tsc -p jsconfig.json`.
declare module "*/scripts/app.js" {
  export const app: import("@comfyorg/comfyui-frontend-types").ComfyApp;
}
declare module "*/scripts/api.js" {
  export const api: import("@comfyorg/comfyui-frontend-types").ComfyApi;
}
