package statebed;

import java.net.URI;
import java.net.URISyntaxException;
import software.amazon.awssdk.core.interceptor.Context;
import software.amazon.awssdk.core.interceptor.ExecutionAttribute;
import software.amazon.awssdk.core.interceptor.ExecutionAttributes;
import software.amazon.awssdk.core.interceptor.ExecutionInterceptor;
import software.amazon.awssdk.core.interceptor.SdkExecutionAttribute;
import software.amazon.awssdk.http.SdkHttpRequest;

/**
 * Every S3 request the S3A client makes, as the request log has them (`RequestLog`): one line per
 * SDK execution, from before its first attempt to after its last, with the attempts beyond the
 * first as `retries` and the failure's class as `error`; op `s3:<Operation>` (PutObject,
 * HeadObject, ...), file `s3a://bucket/key`, level `sdk`. Registered with S3A as
 * `fs.s3a.audit.execution.interceptors`. The checkpoint file manager's own lines (level `fm`)
 * miss what Spark reads or checks past it and what the SDK retried inside one call: a storage
 * fault on Spark's store is proven by these instead (statebed_chaos.faults.toxic_fault).
 */
public class S3RequestInterceptor implements ExecutionInterceptor {
    private static final ExecutionAttribute<Double> START = new ExecutionAttribute<>("statebed.request.start");
    private static final ExecutionAttribute<Integer> ATTEMPTS = new ExecutionAttribute<>("statebed.request.attempts");

    @Override
    public void beforeExecution(Context.BeforeExecution context, ExecutionAttributes attributes) {
        attributes.putAttribute(START, RequestLog.now());
        attributes.putAttribute(ATTEMPTS, 0);
    }

    @Override
    public void beforeTransmission(Context.BeforeTransmission context, ExecutionAttributes attributes) {
        Integer n = attributes.getAttribute(ATTEMPTS);
        attributes.putAttribute(ATTEMPTS, n == null ? 1 : n + 1);
    }

    @Override
    public void afterExecution(Context.AfterExecution context, ExecutionAttributes attributes) {
        record(context.httpRequest(), attributes, null);
    }

    @Override
    public void onExecutionFailure(Context.FailedExecution context, ExecutionAttributes attributes) {
        record(context.httpRequest().orElse(null), attributes, context.exception());
    }

    private static void record(SdkHttpRequest request, ExecutionAttributes attributes, Throwable error) {
        if (!RequestLog.enabled()) {
            return;
        }
        Double start = attributes.getAttribute(START);
        Integer attempts = attributes.getAttribute(ATTEMPTS);
        String op = attributes.getAttribute(SdkExecutionAttribute.OPERATION_NAME);
        long bytes = request == null ? -1 : request.firstMatchingHeader("Content-Length").map(Long::parseLong).orElse(-1L);
        RequestLog.request(
                "s3:" + (op == null ? "unknown" : op),
                file(request),
                start == null ? RequestLog.now() : start,
                RequestLog.now(),
                bytes,
                attempts == null ? 0 : Math.max(0, attempts - 1),
                error);
    }

    /** `s3a://bucket/key` of a path-style request (the bucket is the path's first segment); a
     * listing's is its bucket and `prefix` parameter, `s3a://bucket/some/dir/`. */
    private static String file(SdkHttpRequest request) {
        if (request == null) {
            return "s3a://";
        }
        String path;
        try {
            path = new URI("http", "h", request.encodedPath(), null).getPath();
        } catch (URISyntaxException e) {
            path = request.encodedPath();
        }
        String prefix = request.firstMatchingRawQueryParameter("prefix").orElse("");
        return "s3a:/" + (prefix.isEmpty() ? path : path.replaceAll("/+$", "") + "/" + prefix);
    }
}
