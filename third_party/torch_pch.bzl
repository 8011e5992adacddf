# LibTorch's most used headers (third_party/torch_pch.h), precompiled once for the Bazel build.
#
# Parsing ATen and torch/nn is most of a LibTorch translation unit's compile: 22 s -> 10.5 s for
# worker/optim/optimizer.cc and worker/model/text_layer.cc with Debian's 1.13 (measured with the
# flags below). CMake does the same with target_precompile_headers (cmake/torch.cmake).
#
# torch_pch compiles the header with the C++ toolchain's own command line for a PIC object (the
# same flags, --copt and --cxxopt included, as every cc_* compile here: GCC only uses a PCH made
# with matching flags and falls back to the header otherwise, which -Winvalid-pch reports), and
# returns its deps' CcInfo with the header and its .gch added to the compile inputs. A target
# that needs LibTorch sets copts = TORCH_PCH_COPTS; tools/bazel_to_cmake.py checks that each one
# does.

load("@bazel_tools//tools/build_defs/cc:action_names.bzl", "CPP_COMPILE_ACTION_NAME")
load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

# The generated copy lives only under bazel-bin (third_party/torch_pch/), which is on the quote
# include path, so GCC finds torch_pch.h.gch next to it.
TORCH_PCH_COPTS = ["-include", "third_party/torch_pch/torch_pch.h", "-Winvalid-pch"]

def _torch_pch_impl(ctx):
    cc_toolchain = find_cpp_toolchain(ctx)
    features = cc_common.configure_features(
        ctx = ctx,
        cc_toolchain = cc_toolchain,
        requested_features = ctx.features,
        unsupported_features = ctx.disabled_features,
    )
    header = ctx.actions.declare_file("torch_pch/torch_pch.h")
    ctx.actions.symlink(output = header, target_file = ctx.file.header)
    gch = ctx.actions.declare_file("torch_pch/torch_pch.h.gch")
    contexts = [dep[CcInfo].compilation_context for dep in ctx.attr.deps]
    variables = cc_common.create_compile_variables(
        feature_configuration = features,
        cc_toolchain = cc_toolchain,
        user_compile_flags = ctx.fragments.cpp.copts + ctx.fragments.cpp.cxxopts,
        source_file = header.path,
        output_file = gch.path,
        use_pic = True,
        include_directories = depset(transitive = [c.includes for c in contexts]),
        quote_include_directories = depset(
            [".", ctx.bin_dir.path],
            transitive = [c.quote_includes for c in contexts],
        ),
        system_include_directories = depset(transitive = [c.system_includes for c in contexts]),
        preprocessor_defines = depset(transitive = [c.defines for c in contexts]),
    )
    command_line = cc_common.get_memory_inefficient_command_line(
        feature_configuration = features,
        action_name = CPP_COMPILE_ACTION_NAME,
        variables = variables,
    )
    ctx.actions.run(
        executable = cc_common.get_tool_for_action(
            feature_configuration = features,
            action_name = CPP_COMPILE_ACTION_NAME,
        ),
        arguments = ["-x", "c++-header"] + command_line,
        env = cc_common.get_environment_variables(
            feature_configuration = features,
            action_name = CPP_COMPILE_ACTION_NAME,
            variables = variables,
        ),
        inputs = depset(
            [header, ctx.file.header],
            transitive = [cc_toolchain.all_files] + [c.headers for c in contexts],
        ),
        outputs = [gch],
        mnemonic = "TorchPch",
        progress_message = "Precompiling LibTorch's headers %s" % gch.short_path,
    )
    pch = CcInfo(compilation_context = cc_common.create_compilation_context(
        headers = depset([header, gch]),
    ))
    return [
        DefaultInfo(files = depset([header, gch])),
        cc_common.merge_cc_infos(cc_infos = [pch] + [dep[CcInfo] for dep in ctx.attr.deps]),
    ]

torch_pch = rule(
    implementation = _torch_pch_impl,
    attrs = {
        "header": attr.label(allow_single_file = [".h"], mandatory = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "_cc_toolchain": attr.label(default = Label("@bazel_tools//tools/cpp:current_cc_toolchain")),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)
