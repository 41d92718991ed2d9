#!/usr/bin/env python3
"""Lists a crate's public API from rustdoc's JSON output, one item a line,
sorted: every public module, type, trait, function and constant with its
path, the fields and variants of public types, the signatures of functions
and of methods in inherent impls, and the traits each type implements.

Used by scripts/public-api, which keeps the lists in api/ so that a change
to the public API shows in review.
"""
import json
import sys


def main(path):
    doc = json.load(open(path))
    index = doc["index"]
    lines = set()

    def item(i):
        return index.get(str(i))

    def generic_args(args):
        if not args:
            return ""
        if "angle_bracketed" in args:
            parts = []
            for a in args["angle_bracketed"]["args"]:
                if "type" in a:
                    parts.append(ty(a["type"]))
                elif "lifetime" in a:
                    parts.append(a["lifetime"])
                elif "const" in a:
                    parts.append(str(a["const"].get("expr", "_")))
                else:
                    parts.append("_")
            for c in args["angle_bracketed"].get("constraints", []):
                binding = c.get("binding", {})
                if "equality" in binding and "type" in binding["equality"]:
                    parts.append(f"{c['name']} = {ty(binding['equality']['type'])}")
                else:
                    parts.append(c["name"])
            return "<" + ", ".join(parts) + ">" if parts else ""
        if "parenthesized" in args:
            p = args["parenthesized"]
            out = "(" + ", ".join(ty(t) for t in p["inputs"]) + ")"
            if p.get("output"):
                out += " -> " + ty(p["output"])
            return out
        return ""

    def bound(b):
        if "trait_bound" in b:
            t = b["trait_bound"]["trait"]
            maybe = "?" if b["trait_bound"].get("modifier") == "maybe" else ""
            return maybe + t["path"] + generic_args(t.get("args"))
        if "outlives" in b:
            return b["outlives"]
        return "_"

    def ty(t):
        if t is None:
            return "()"
        if "resolved_path" in t:
            p = t["resolved_path"]
            return p["path"] + generic_args(p.get("args"))
        if "generic" in t:
            return t["generic"]
        if "primitive" in t:
            return t["primitive"]
        if "borrowed_ref" in t:
            r = t["borrowed_ref"]
            life = (r["lifetime"] + " ") if r.get("lifetime") else ""
            return "&" + life + ("mut " if r["is_mutable"] else "") + ty(r["type"])
        if "tuple" in t:
            return "(" + ", ".join(ty(x) for x in t["tuple"]) + ")"
        if "slice" in t:
            return "[" + ty(t["slice"]) + "]"
        if "array" in t:
            return "[" + ty(t["array"]["type"]) + "; " + str(t["array"]["len"]) + "]"
        if "impl_trait" in t:
            return "impl " + " + ".join(bound(b) for b in t["impl_trait"])
        if "dyn_trait" in t:
            traits = [x["trait"]["path"] + generic_args(x["trait"].get("args")) for x in t["dyn_trait"]["traits"]]
            return "dyn " + " + ".join(traits)
        if "qualified_path" in t:
            q = t["qualified_path"]
            trait = q.get("trait")
            base = ty(q["self_type"])
            if trait:
                return f"<{base} as {trait['path']}>::{q['name']}"
            return f"{base}::{q['name']}"
        if "raw_pointer" in t:
            r = t["raw_pointer"]
            return ("*mut " if r["is_mutable"] else "*const ") + ty(r["type"])
        if "function_pointer" in t:
            return "fn(..)"
        return "_"

    def generics(g):
        params = []
        for p in g.get("params", []):
            kind = p["kind"]
            if "type" in kind:
                bounds = kind["type"]["bounds"]
                if kind["type"].get("is_synthetic"):
                    continue
                params.append(p["name"] + (": " + " + ".join(bound(b) for b in bounds) if bounds else ""))
            elif "lifetime" in kind:
                params.append(p["name"])
            elif "const" in kind:
                params.append("const " + p["name"] + ": " + ty(kind["const"]["type"]))
        return "<" + ", ".join(params) + ">" if params else ""

    def signature(name, f):
        header = f["header"]
        prefix = ("const " if header["is_const"] else "") + ("async " if header["is_async"] else "")
        sig = f["sig"]
        inputs = []
        for arg_name, arg_ty in sig["inputs"]:
            if arg_name == "self":
                inputs.append({"&Self": "&self", "&mut Self": "&mut self", "Self": "self"}.get(ty(arg_ty), "self: " + ty(arg_ty)))
            else:
                inputs.append(f"{arg_name}: {ty(arg_ty)}")
        out = ""
        if sig.get("output") is not None:
            out = " -> " + ty(sig["output"])
        return f"{prefix}fn {name}{generics(f['generics'])}({', '.join(inputs)}){out}"

    def deprecated(it):
        return " #[deprecated]" if it.get("deprecation") else ""

    def attrs(it):
        shown = []
        for a in it.get("attrs", []):
            text = a if isinstance(a, str) else json.dumps(a)
            if "non_exhaustive" in text:
                shown.append("#[non_exhaustive] ")
        return "".join(shown)

    def walk_impls(path, impl_ids):
        for impl_id in impl_ids:
            imp = item(impl_id)
            if imp is None:
                continue
            inner = imp["inner"]["impl"]
            if inner.get("is_synthetic") or inner.get("blanket_impl"):
                continue
            trait = inner.get("trait")
            if trait is not None:
                lines.add(f"impl {trait['path']}{generic_args(trait.get('args'))} for {path}")
                continue
            for member_id in inner["items"]:
                member = item(member_id)
                if member is None or member.get("visibility") != "public":
                    continue
                m = member["inner"]
                if "function" in m:
                    lines.add(f"{signature(path + '::' + member['name'], m['function'])}{deprecated(member)}")
                elif "assoc_const" in m:
                    lines.add(f"const {path}::{member['name']}: {ty(m['assoc_const']['type'])}")

    def walk(module_id, path, seen):
        if module_id in seen:
            return
        seen.add(module_id)
        module = item(module_id)
        for child_id in module["inner"]["module"]["items"]:
            child = item(child_id)
            if child is None:
                continue
            inner = child["inner"]
            if "use" in inner:
                use = inner["use"]
                target = item(use["id"]) if use.get("id") is not None else None
                name = use["name"]
                if target is None:
                    lines.add(f"pub use {path}::{name} = {use['source']}")
                    continue
                describe(target, f"{path}::{name}", seen)
                continue
            if child.get("visibility") != "public":
                continue
            describe(child, f"{path}::{child['name']}", seen)

    def describe(it, path, seen):
        inner = it["inner"]
        kind = next(iter(inner))
        dep = deprecated(it)
        if kind == "module":
            lines.add(f"mod {path}")
            walk(it["id"], path, seen)
        elif kind == "struct":
            s = inner["struct"]
            lines.add(f"{attrs(it)}struct {path}{generics(s['generics'])}{dep}")
            k = s["kind"]
            if "plain" in k:
                for field_id in k["plain"]["fields"]:
                    field = item(field_id)
                    if field and field.get("visibility") == "public":
                        lines.add(f"{path}::{field['name']}: {ty(field['inner']['struct_field'])}")
            elif "tuple" in k:
                for n, field_id in enumerate(k["tuple"]):
                    field = item(field_id) if field_id is not None else None
                    if field and field.get("visibility") == "public":
                        lines.add(f"{path}::{n}: {ty(field['inner']['struct_field'])}")
            walk_impls(path, s["impls"])
        elif kind == "enum":
            e = inner["enum"]
            lines.add(f"{attrs(it)}enum {path}{generics(e['generics'])}{dep}")
            for variant_id in e["variants"]:
                variant = item(variant_id)
                v = variant["inner"]["variant"]["kind"]
                fields = ""
                if isinstance(v, dict) and "tuple" in v:
                    fields = "(" + ", ".join(ty(item(f)["inner"]["struct_field"]) if f is not None else "_" for f in v["tuple"]) + ")"
                elif isinstance(v, dict) and "struct" in v:
                    fields = " { " + ", ".join(f"{item(f)['name']}: {ty(item(f)['inner']['struct_field'])}" for f in v["struct"]["fields"]) + " }"
                lines.add(f"{path}::{variant['name']}{fields}")
            walk_impls(path, e["impls"])
        elif kind == "trait":
            t = inner["trait"]
            lines.add(f"trait {path}{generics(t['generics'])}{dep}")
            for member_id in t["items"]:
                member = item(member_id)
                m = member["inner"]
                if "function" in m:
                    provided = " (provided)" if m["function"].get("has_body") else ""
                    lines.add(f"{signature(path + '::' + member['name'], m['function'])}{provided}")
                elif "assoc_type" in m:
                    lines.add(f"type {path}::{member['name']}")
        elif kind == "function":
            lines.add(f"{signature(path, inner['function'])}{dep}")
        elif kind == "constant":
            lines.add(f"const {path}: {ty(inner['constant']['type'])}")
        elif kind == "static":
            lines.add(f"static {path}: {ty(inner['static']['type'])}")
        elif kind == "type_alias":
            lines.add(f"type {path} = {ty(inner['type_alias']['type'])}")
        elif kind == "macro":
            lines.add(f"macro {path}!")
        else:
            lines.add(f"{kind} {path}")

    root = doc["root"]
    name = index[str(root)]["name"]
    walk(root, name, set())
    sys.stdout.write("".join(line + "\n" for line in sorted(lines)))


if __name__ == "__main__":
    main(sys.argv[1])
