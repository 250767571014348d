import Foundation
import CRdKafka

/// `rd_kafka_produceva`, the non-variadic form of `rd_kafka_producev` that Swift can call.
enum RDKafkaProduce {
    static func produce(_ handle: OpaquePointer, topic: String, key: [UInt8]?, value: [UInt8],
                        headers: [KafkaHeader], timestampMilliseconds: Int64? = nil,
                        opaque: UnsafeMutableRawPointer) -> rd_kafka_resp_err_t {
        topic.withCString { topicName in
            value.withUnsafeBytes { valueBytes in
                withOptionalBytes(key) { keyBytes in
                    var values: [rd_kafka_vu_t] = []
                    var vu = rd_kafka_vu_t()
                    vu.vtype = RD_KAFKA_VTYPE_TOPIC
                    vu.u.cstr = topicName
                    values.append(vu)
                    vu = rd_kafka_vu_t()
                    vu.vtype = RD_KAFKA_VTYPE_VALUE
                    vu.u.mem.ptr = UnsafeMutableRawPointer(mutating: valueBytes.baseAddress)
                    vu.u.mem.size = valueBytes.count
                    values.append(vu)
                    if let keyBytes {
                        vu = rd_kafka_vu_t()
                        vu.vtype = RD_KAFKA_VTYPE_KEY
                        vu.u.mem.ptr = UnsafeMutableRawPointer(mutating: keyBytes.baseAddress)
                        vu.u.mem.size = keyBytes.count
                        values.append(vu)
                    }
                    if let timestampMilliseconds {
                        vu = rd_kafka_vu_t()
                        vu.vtype = RD_KAFKA_VTYPE_TIMESTAMP
                        vu.u.i64 = timestampMilliseconds
                        values.append(vu)
                    }
                    vu = rd_kafka_vu_t()
                    vu.vtype = RD_KAFKA_VTYPE_MSGFLAGS
                    vu.u.i = RD_KAFKA_MSG_F_COPY
                    values.append(vu)
                    vu = rd_kafka_vu_t()
                    vu.vtype = RD_KAFKA_VTYPE_OPAQUE
                    vu.u.ptr = opaque
                    values.append(vu)
                    // One header list owned by the caller until the produce succeeds: librdkafka
                    // 2.0's per-header form (VTYPE_HEADER) frees its list twice when a produce fails.
                    let list = headers.isEmpty ? nil : headerList(headers)
                    if let list {
                        vu = rd_kafka_vu_t()
                        vu.vtype = RD_KAFKA_VTYPE_HEADERS
                        vu.u.headers = list
                        values.append(vu)
                    }
                    return values.withUnsafeBufferPointer { buffer in
                        guard let error = rd_kafka_produceva(handle, buffer.baseAddress, buffer.count) else {
                            return RD_KAFKA_RESP_ERR_NO_ERROR
                        }
                        defer { rd_kafka_error_destroy(error) }
                        if let list { rd_kafka_headers_destroy(list) }
                        return rd_kafka_error_code(error)
                    }
                }
            }
        }
    }

    /// A librdkafka header list (values copied in).
    private static func headerList(_ headers: [KafkaHeader]) -> OpaquePointer {
        let list = rd_kafka_headers_new(headers.count)!
        for header in headers {
            header.value.withUnsafeBytes { bytes in
                _ = rd_kafka_header_add(list, header.name, -1, bytes.baseAddress, bytes.count)
            }
        }
        return list
    }

    private static func withOptionalBytes<R>(_ bytes: [UInt8]?, _ body: (UnsafeRawBufferPointer?) -> R) -> R {
        guard let bytes else { return body(nil) }
        return bytes.withUnsafeBytes { body($0) }
    }
}
