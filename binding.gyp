{
  "targets": [
    {
      "target_name": "nfkeeper",
      "sources": [
        "native/addon.cc",
        "native/common.cc",
        "native/expr_table.cc",
        "native/socket.cc",
        "native/dump.cc",
        "native/batch.cc",
        "native/encode.cc",
        "native/decode.cc",
        "native/object.cc",
        "native/decode_json.cc",
        "native/attr.cc",
        "native/monitor.cc",
        "native/event.cc",
        "native/element.cc",
        "native/digest.cc",
        "native/notify.cc",
        "native/peercred.cc",
        "native/link.cc",
        "native/lock.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
      "libraries": ["<!@(pkg-config --libs libnftnl libmnl)"],
      "cflags": ["<!@(pkg-config --cflags libnftnl libmnl)"],
      "conditions": [
        ["'<!(echo $NFKEEPER_PREBUILD)'=='1'", {
          "ldflags": ["-Wl,--enable-new-dtags", "-Wl,-rpath,'$$ORIGIN/<!(echo $NFKEEPER_LIBC)'"]
        }],
        ["'<!(echo $NFKEEPER_SANITIZE)'=='1'", {
          "cflags_cc": ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-O1"],
          "ldflags": ["-fsanitize=address,undefined"]
        }]
      ]
    }
  ]
}
