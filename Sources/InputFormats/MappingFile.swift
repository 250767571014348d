import FleetAuth
import FleetEngine
import Foundation
import JSON
import Yams

/// A mapping file that cannot be used: where (line and key) and why, in one line.
public struct MappingError: Error, Sendable, CustomStringConvertible, Equatable {
    public let description: String

    public init(description: String) {
        self.description = description
    }
}

/// Reads a mapping written in YAML or JSON (JSON is YAML) into an `InputMapping`, checking
/// everything a record does not decide: unknown keys, bad paths, units, formats and zones.
///
/// ```yaml
/// envelope: payload.after            # optional: fields are read inside this object
/// connect_schema: true               # optional: read the envelope's semantic types from "schema"
/// key_must_match: false              # optional: the record key must equal vehicle_id
/// skip:                              # optional: records left out (committed, counted)
///   - { path: payload.op, equals: d }
///   - { empty_value: true }
/// fields:
///   vehicle_id: device.uniqueId      # a path, or { path | key | header | timestamp | constant | first_of }
///   lat: position.latitude
///   lng: position.longitude
///   recorded_at: { path: position.fixTime, format: rfc3339 }
///   speed_mps: { path: position.speed, unit: knots }
/// ```
///
/// Values keep the native event's types unless `convert: true` lets a field take numeric
/// text for a number (or a whole number for `vehicle_id`).
public enum MappingFile {
    public static func load(path: String) throws(MappingError) -> InputMapping {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw MappingError(description: "cannot read \(path)")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw MappingError(description: "\(path) is not UTF-8 text")
        }
        return try parse(text, name: path)
    }

    public static func parse(_ text: String, name: String) throws(MappingError) -> InputMapping {
        let root: Node
        do {
            guard let node = try Yams.compose(yaml: text) else { throw MappingError(description: "the mapping is empty") }
            root = node
        } catch let error as MappingError {
            throw error
        } catch let error as YamlError {
            throw MappingError(description: Self.describe(error))
        } catch {
            throw MappingError(description: "not YAML or JSON: \(error)")
        }
        var reader = Reader(mapping: InputMapping(name: name))
        try reader.read(root)
        return reader.mapping
    }

    /// libyaml's problem and position, without the snippet it appends over several lines.
    private static func describe(_ error: YamlError) -> String {
        switch error {
        case .scanner(_, let problem, let mark, _), .parser(_, let problem, let mark, _), .composer(_, let problem, let mark, _):
            "line \(mark.line): not YAML or JSON: \(problem)"
        default:
            "not YAML or JSON: \(String(describing: error).split(separator: "\n").first ?? "")"
        }
    }
}

private struct Reader {
    var mapping: InputMapping

    static let topKeys = ["description", "envelope", "key_must_match", "connect_schema", "skip", "fields", "coordinates"]
    static let originKeys = ["path", "key", "header", "timestamp", "constant", "first_of"]

    mutating func read(_ root: Node) throws(MappingError) {
        let top = try Self.object(root, at: "the mapping")
        try Self.onlyKeys(top, Self.topKeys, at: nil, root)
        if let envelope = top["envelope"] {
            let paths = envelope.sequence.map { Array($0) } ?? [envelope]
            mapping.envelope = try paths.map { node throws(MappingError) in try Self.path(node, at: "envelope") }
        }
        if let keyMustMatch = top["key_must_match"] { mapping.keyMustMatch = try Self.flag(keyMustMatch, at: "key_must_match") }
        if let connectSchema = top["connect_schema"] {
            mapping.readsConnectSchema = try Self.flag(connectSchema, at: "connect_schema")
        }
        if let skip = top["skip"] {
            guard let rules = skip.sequence else { throw Self.error(skip, "skip", "must be a list of rules") }
            mapping.skipRules = try rules.enumerated().map { index, rule throws(MappingError) in
                try Self.skipRule(rule, at: "skip[\(index)]")
            }
        }
        if let coordinates = top["coordinates"] { mapping.coordinates = try Self.coordinates(coordinates) }
        guard let fields = top["fields"] else { throw Self.error(root, "fields", "is missing: every mapping names where vehicle_id, lat, lng and recorded_at come from") }
        for (keyNode, spec) in try Self.object(fields, at: "fields") {
            let name = keyNode.string ?? ""
            guard let field = InputMapping.Field(rawValue: name) else {
                throw Self.error(keyNode, "fields.\(name)", "unknown field (one of \(InputMapping.Field.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            mapping.sources[field] = try Self.source(spec, field: field)
        }
        try checkRequired(fields)
    }

    private func checkRequired(_ fields: Node) throws(MappingError) {
        var required: [InputMapping.Field] = [.vehicleId, .recordedAt]
        if mapping.coordinates == nil {
            required += [.latitude, .longitude]
        } else if mapping.sources[.latitude] != nil || mapping.sources[.longitude] != nil {
            throw Self.error(fields, "fields", "lat and lng come from coordinates; map them in one place only")
        }
        for field in required where mapping.sources[field] == nil {
            throw Self.error(fields, "fields.\(field.rawValue)", "is missing: the event needs it")
        }
    }

    // MARK: Fields

    private static func source(_ node: Node, field: InputMapping.Field) throws(MappingError) -> InputMapping.Source {
        let at = "fields.\(field.rawValue)"
        if node.scalar != nil { return InputMapping.Source(origins: [.path(try path(node, at: at))]) }
        let spec = try object(node, at: at)
        var allowed = originKeys + ["default", "map", "convert"]
        switch field {
        case .speed: allowed.append("unit")
        case .recordedAt: allowed += ["format", "zone"]
        case .vehicleId: allowed += ["strip_prefix", "replace"]
        default: break
        }
        try onlyKeys(spec, allowed, at: at, node)
        var source = InputMapping.Source(origins: try origins(spec, node, at: at))
        if let fallback = spec["default"] { source.fallback = try value(fallback) }
        if let convert = spec["convert"] { source.converts = try flag(convert, at: "\(at).convert") }
        if let map = spec["map"] {
            for (from, to) in try object(map, at: "\(at).map") {
                guard let key = from.string else { throw error(from, "\(at).map", "keys must be scalars") }
                source.valueMap[key] = try value(to)
            }
        }
        if let unit = spec["unit"] {
            let name = unit.string ?? ""
            guard let speedUnit = InputMapping.SpeedUnit(rawValue: name) else {
                throw error(unit, "\(at).unit", "unknown unit \"\(name)\" (one of \(InputMapping.SpeedUnit.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            source.speedUnit = speedUnit
        }
        if field == .recordedAt { source.timeFormat = try timeFormat(spec, node, at: at) }
        if let prefix = spec["strip_prefix"] {
            guard let text = prefix.string, !text.isEmpty else { throw error(prefix, "\(at).strip_prefix", "must be text") }
            source.stripPrefix = text
        }
        if let replace = spec["replace"] {
            for (from, to) in try object(replace, at: "\(at).replace") {
                guard let target = from.string, !target.isEmpty, let replacement = to.string else {
                    throw error(from, "\(at).replace", "must map text to text")
                }
                source.replacements.append((target, replacement))
            }
        }
        return source
    }

    /// Exactly one of `path`, `key`, `header`, `timestamp`, `constant`, or `first_of` (a list of those).
    private static func origins(_ spec: Node.Mapping, _ node: Node, at: String) throws(MappingError) -> [InputMapping.Origin] {
        let present = originKeys.filter { spec[$0] != nil }
        guard present.count == 1 else {
            throw error(node, at, present.isEmpty ? "names no source (one of \(originKeys.joined(separator: ", ")))"
                                                  : "names several sources (\(present.joined(separator: ", "))); use first_of for alternatives")
        }
        if let alternatives = spec["first_of"] {
            guard let list = alternatives.sequence, !list.isEmpty else { throw error(alternatives, "\(at).first_of", "must be a non-empty list") }
            return try list.enumerated().map { index, item throws(MappingError) in
                let where_ = "\(at).first_of[\(index)]"
                if item.scalar != nil { return .path(try path(item, at: where_)) }
                let entry = try object(item, at: where_)
                try onlyKeys(entry, originKeys.filter { $0 != "first_of" }, at: where_, item)
                guard let origin = try origins(entry, item, at: where_).first else { throw error(item, where_, "names no source") }
                return origin
            }
        }
        return [try origin(spec, present[0], at: at)]
    }

    private static func origin(_ spec: Node.Mapping, _ kind: String, at: String) throws(MappingError) -> InputMapping.Origin {
        let node = spec[kind]!
        switch kind {
        case "path": return .path(try path(node, at: "\(at).path"))
        case "key":
            guard try flag(node, at: "\(at).key") else { throw error(node, "\(at).key", "must be true") }
            return .key
        case "timestamp":
            guard try flag(node, at: "\(at).timestamp") else { throw error(node, "\(at).timestamp", "must be true") }
            return .timestamp
        case "header":
            guard let name = node.string, !name.isEmpty else { throw error(node, "\(at).header", "must name a header") }
            return .header(name)
        default:
            return .constant(try value(node))
        }
    }

    private static func timeFormat(_ spec: Node.Mapping, _ node: Node, at: String) throws(MappingError) -> InputMapping.TimeFormat {
        let name = spec["format"]?.string ?? "auto"
        let zone = spec["zone"]
        let formats = ["auto", "rfc3339", "iso8601-local", "epoch-seconds", "epoch-millis", "epoch-micros", "epoch-nanos"]
        if zone != nil, name != "iso8601-local" { throw error(zone!, "\(at).zone", "applies only to format iso8601-local") }
        switch name {
        case "auto": return .automatic
        case "rfc3339": return .rfc3339
        case "epoch-seconds": return .epoch(unitsPerSecond: 1)
        case "epoch-millis": return .epoch(unitsPerSecond: 1000)
        case "epoch-micros": return .epoch(unitsPerSecond: 1_000_000)
        case "epoch-nanos": return .epoch(unitsPerSecond: 1_000_000_000)
        case "iso8601-local":
            guard let zone else { throw error(node, "\(at).zone", "is missing: a time without offset needs its zone (UTC, +02:00, Europe/Berlin)") }
            return .local(try timeZone(zone, at: "\(at).zone"))
        default:
            throw error(spec["format"] ?? node, "\(at).format", "unknown format \"\(name)\" (one of \(formats.joined(separator: ", ")))")
        }
    }

    private static func timeZone(_ node: Node, at: String) throws(MappingError) -> TimeZone {
        let name = node.string ?? ""
        if name == "UTC" || name == "Z" { return TimeZone(secondsFromGMT: 0)! }
        if let offset = RFC3339.parseMilliseconds("1970-01-01T00:00:00" + name).map({ -$0 / 1000 }),
           let zone = TimeZone(secondsFromGMT: Int(offset)) {
            return zone
        }
        guard let zone = TimeZone(identifier: name) else {
            throw error(node, at, "unknown time zone \"\(name)\" (UTC, an offset like +02:00, or a name like Europe/Berlin)")
        }
        return zone
    }

    private static func coordinates(_ node: Node) throws(MappingError) -> InputMapping.Coordinates {
        let spec = try object(node, at: "coordinates")
        try onlyKeys(spec, ["path", "order"], at: "coordinates", node)
        guard let pathNode = spec["path"] else { throw error(node, "coordinates.path", "is missing") }
        let order = spec["order"]?.string ?? "lng,lat"
        guard ["lng,lat", "lat,lng"].contains(order) else {
            throw error(spec["order"]!, "coordinates.order", "must be lng,lat (GeoJSON) or lat,lng")
        }
        return InputMapping.Coordinates(path: try path(pathNode, at: "coordinates.path"), longitudeFirst: order == "lng,lat")
    }

    // MARK: Skip rules

    private static func skipRule(_ node: Node, at: String) throws(MappingError) -> InputMapping.SkipRule {
        let rule = try object(node, at: at)
        if let empty = rule["empty_value"] {
            try onlyKeys(rule, ["empty_value"], at: at, node)
            guard try flag(empty, at: "\(at).empty_value") else { throw error(empty, "\(at).empty_value", "must be true") }
            return .emptyValue
        }
        try onlyKeys(rule, ["path", "equals", "not_equals", "in", "absent"], at: at, node)
        guard let pathNode = rule["path"] else { throw error(node, at, "names no path (or empty_value: true)") }
        let target = try path(pathNode, at: "\(at).path")
        let tests = ["equals", "not_equals", "in", "absent"].filter { rule[$0] != nil }
        guard tests.count == 1 else { throw error(node, at, "needs exactly one of equals, not_equals, in, absent") }
        switch tests[0] {
        case "equals": return .equals(target, try value(rule["equals"]!))
        case "not_equals": return .notEquals(target, try value(rule["not_equals"]!))
        case "in":
            guard let values = rule["in"]!.sequence else { throw error(rule["in"]!, "\(at).in", "must be a list") }
            return .oneOf(target, try values.map { item throws(MappingError) in try value(item) })
        default:
            guard try flag(rule["absent"]!, at: "\(at).absent") else { throw error(node, "\(at).absent", "must be true") }
            return .absent(target)
        }
    }

    // MARK: Nodes

    private static func object(_ node: Node, at: String) throws(MappingError) -> Node.Mapping {
        guard let mapping = node.mapping else { throw error(node, at, "must be a mapping of keys to values") }
        return mapping
    }

    private static func onlyKeys(_ mapping: Node.Mapping, _ allowed: [String], at: String?, _ node: Node) throws(MappingError) {
        for key in mapping.keys {
            let name = key.string ?? "?"
            guard allowed.contains(name) else {
                let place = at.map { "\($0).\(name)" } ?? name
                throw error(key, place, "unknown key (one of \(allowed.joined(separator: ", ")))")
            }
        }
    }

    private static func path(_ node: Node, at: String) throws(MappingError) -> ValuePath {
        guard let text = node.string else { throw error(node, at, "must be a path like position.latitude") }
        do {
            return try ValuePath(parsing: text)
        } catch {
            throw Self.error(node, at, "bad path \"\(text)\": \(error.message)")
        }
    }

    private static func flag(_ node: Node, at: String) throws(MappingError) -> Bool {
        guard let flag = node.bool else { throw error(node, at, "must be true or false") }
        return flag
    }

    /// A YAML value as JSON: plain scalars by their resolved tag (quoted ones stay text).
    private static func value(_ node: Node) throws(MappingError) -> JSONValue {
        switch node {
        case .scalar(let scalar):
            if scalar.style == .plain {
                if node.null != nil { return .null }
                if let flag = node.bool { return .bool(flag) }
                if let integer = node.int { return .number(Double(integer)) }
                if let number = node.float { return .number(number) }
            }
            return .string(scalar.string)
        case .sequence(let sequence):
            return .array(try sequence.map { item throws(MappingError) in try value(item) })
        case .mapping(let mapping):
            var object: [String: JSONValue] = [:]
            for (key, item) in mapping { object[key.string ?? ""] = try value(item) }
            return .object(object)
        case .alias:
            throw error(node, "a value", "aliases are not supported")
        }
    }

    private static func error(_ node: Node, _ at: String, _ message: String) -> MappingError {
        let line = node.mark.map { "line \($0.line): " } ?? ""
        return MappingError(description: "\(line)\(at): \(message)")
    }
}
