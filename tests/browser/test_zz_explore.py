from tests.browser.browser_support import app_page

def test_explore(server):
    with app_page(server, width=1600, height=1000, open_panel=False) as page:
        print(page.evaluate("window.__COMFYUI_FRONTEND_VERSION__"))
        print(page.evaluate("""[...document.querySelectorAll('.comfyui-menu, .comfyui-menu-right, .actionbar, .actionbar-container, [class*=topbar], [class*=top-bar], .comfy-menu-button-wrapper, .workflow-tabs-container, .queue-button-group')].slice(0, 14).map(e => e.tagName + ' ' + (e.className.baseVal ?? e.className).slice(0,90) + ' ' + JSON.stringify([Math.round(e.getBoundingClientRect().x), Math.round(e.getBoundingClientRect().y), Math.round(e.getBoundingClientRect().width), Math.round(e.getBoundingClientRect().height)]))"""))
        print(page.evaluate("typeof window.app.menu?.settingsGroup?.element"))
        page.screenshot(path=f"/tmp/wt38/top_{page.evaluate('window.__COMFYUI_FRONTEND_VERSION__')}.png")
